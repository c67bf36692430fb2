"""The Ray engine: each replica an actor, frames sent replica to replica, no dispatcher."""

from __future__ import annotations

from typing import Any

__all__ = ["RayEngine"]


def __getattr__(name: str) -> Any:
    # Lazy: a replica actor imports this package for its own module and needs no driver.
    if name == "RayEngine":
        from fitwork.engine.ray.engine import RayEngine

        return RayEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
