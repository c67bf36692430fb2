"""Errors the fit solver raises: what a unit or target needs beside what the fleet offers."""

from __future__ import annotations

from fitwork.errors import FitworkError


class FitInputError(FitworkError, ValueError):
    """Units or node types were described in a way the solver cannot use."""


class UnitFitsNowhere(FitInputError):
    """One replica of a unit is larger than any node that offers a class it can run on."""

    def __init__(self, unit: str, message: str) -> None:
        super().__init__(message)
        self.unit = unit


class TargetUnreachable(FitworkError, ValueError):
    """A ``min_cost`` target is above the most throughput the fleet can give."""

    def __init__(self, target: float, achievable: float, bound: float) -> None:
        super().__init__(
            f"target throughput {target:.6g} items/s is out of reach: the fleet gives at most "
            f"{achievable:.6g} items/s (upper bound {bound:.6g}); lower the target or add nodes"
        )
        self.target = target
        self.achievable = achievable
        self.bound = bound


class SolverError(FitworkError, RuntimeError):
    """HiGHS ended without a plan (time limit before any solution, or a numerical failure)."""
