"""Engines run a pipeline's units as replicas around one run core; each passes one contract."""

from fitwork.engine.contract import Engine, RunResult
from fitwork.engine.options import LocalOptions, RayOptions, RunOptions, SimOptions
from fitwork.engine.registry import ENGINES, get_engine

__all__ = ["ENGINES", "Engine", "LocalOptions", "RayOptions", "RunOptions", "RunResult",
           "SimOptions", "get_engine"]
