"""Decompose a monolithic function into a pipeline of units: ``decompose(fn, sample=...)``."""

from fitwork.decomposition.decomposer import DecomposedPipeline, decompose, explain
from fitwork.decomposition.hints import hint, with_context
from fitwork.decomposition.report import Cost, Decomposition, Merge, UnitReport
from fitwork.decomposition.source import DecomposeError

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
