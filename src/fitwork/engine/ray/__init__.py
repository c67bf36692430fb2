"""The Ray engine: each replica an actor, frames sent replica to replica, no dispatcher."""

from fitwork.engine.ray.driver import RayEngine

__all__ = ["RayEngine"]
