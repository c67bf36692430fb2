"""Decompose a monolithic function into a pipeline of units: ``decompose(fn, sample=...)``."""

from fitwork.workload.decompose.decomposer import DecomposedPipeline, decompose, explain
from fitwork.workload.decompose.hints import hint, with_context
from fitwork.workload.decompose.report import Cost, Decomposition, Merge, UnitReport
from fitwork.workload.decompose.source import DecomposeError

__all__ = [
    "Cost",
    "DecomposeError",
    "DecomposedPipeline",
    "Decomposition",
    "Merge",
    "UnitReport",
    "decompose",
    "explain",
    "hint",
    "with_context",
]
