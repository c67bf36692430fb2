"""Engines run a pipeline's units as replicas; each one passes the same contract suite."""

from fitwork.engine.base import Engine, RunOptions, RunResult, get_engine

__all__ = ["Engine", "RunOptions", "RunResult", "get_engine"]
