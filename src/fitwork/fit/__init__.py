"""Fit: choose integer replicas of each unit per device class and node type (HiGHS MILP)."""

from fitwork.fit.errors import FitInputError, SolverError, TargetUnreachable, UnitFitsNowhere
from fitwork.fit.monolithic import monolithic
from fitwork.fit.result import ClassUtilization, FitResult, NodeUsage, Placement
from fitwork.fit.solver import solve
from fitwork.fit.spec import ClassDemand, NodeType, UnitDemand, is_cpu_class

__all__ = [
    "ClassDemand",
    "ClassUtilization",
    "FitInputError",
    "FitResult",
    "NodeType",
    "NodeUsage",
    "Placement",
    "SolverError",
    "TargetUnreachable",
    "UnitDemand",
    "UnitFitsNowhere",
    "is_cpu_class",
    "monolithic",
    "solve",
]
