"""The embedded default engine: one process per replica on this host, kernel-backed channels."""

from fitwork.engine.local.driver import LocalEngine

__all__ = ["LocalEngine"]
