"""fitwork: break a workload into units, fit each to the silicon that suits it, run, measure."""

from __future__ import annotations

from typing import Any

from fitwork.engine.contract import RunResult
from fitwork.engine.options import RunOptions
from fitwork.errors import (
    EngineError,
    FitworkError,
    InputError,
    PipelineLoadError,
    TooManyFailures,
    UnitDefinitionError,
)
from fitwork.failure import Failure
from fitwork.placement import Group, Placement
from fitwork.resources import Resources
from fitwork.runner import run
from fitwork.telemetry.record import Progress, RunRecord
from fitwork.version import __version__
from fitwork.workload import Kind, Pipeline, Retry, Unit, unit

# Loaded on first use, so `import fitwork` stays light (the solver brings in SciPy).
_LAZY = {
    "decompose": "fitwork.decomposition",
    "explain": "fitwork.decomposition",
    "hint": "fitwork.decomposition",
    "with_context": "fitwork.decomposition",
    "Decomposition": "fitwork.decomposition",
    "DecomposeError": "fitwork.decomposition",
    "profile_pipeline": "fitwork.profiling",
    "PipelineProfile": "fitwork.profiling",
    "plan_for": "fitwork.fit.plan",
    "Plan": "fitwork.fit.plan",
    "Fleet": "fitwork.hardware.fleet",
    "discover_local": "fitwork.hardware.discover",
    "catalog": "fitwork.hardware.catalog",
    "render_report": "fitwork.report.html",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fitwork' has no attribute {name!r}")


__all__ = [
    "DecomposeError",
    "Decomposition",
    "EngineError",
    "Failure",
    "FitworkError",
    "Fleet",
    "Group",
    "InputError",
    "Kind",
    "Pipeline",
    "PipelineLoadError",
    "PipelineProfile",
    "Placement",
    "Plan",
    "Progress",
    "Resources",
    "Retry",
    "RunOptions",
    "RunRecord",
    "RunResult",
    "TooManyFailures",
    "Unit",
    "UnitDefinitionError",
    "__version__",
    "catalog",
    "decompose",
    "discover_local",
    "explain",
    "hint",
    "plan_for",
    "profile_pipeline",
    "render_report",
    "run",
    "unit",
    "with_context",
]
