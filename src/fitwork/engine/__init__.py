"""Engines run a pipeline's units as replicas around one run core; each passes one contract."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fitwork.engine.contract import Engine, RunResult
    from fitwork.engine.options import LocalOptions, RayOptions, RunOptions, SimOptions
    from fitwork.engine.registry import ENGINES, get_engine

# Loaded on first use: a replica process imports one engine module, never the driver's.
_LAZY = {
    "Engine": "fitwork.engine.contract", "RunResult": "fitwork.engine.contract",
    "LocalOptions": "fitwork.engine.options", "RayOptions": "fitwork.engine.options",
    "RunOptions": "fitwork.engine.options", "SimOptions": "fitwork.engine.options",
    "ENGINES": "fitwork.engine.registry", "get_engine": "fitwork.engine.registry",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ENGINES", "Engine", "LocalOptions", "RayOptions", "RunOptions", "RunResult",
           "SimOptions", "get_engine"]
