"""fitwork: break a workload into units, fit each to the silicon that suits it, run, measure."""

from __future__ import annotations

from typing import Any

from fitwork.engine.base import RunOptions, RunResult
from fitwork.errors import (
    EngineError,
    FitworkError,
    InputError,
    PipelineLoadError,
    TooManyFailures,
    UnitDefinitionError,
)
from fitwork.telemetry.record import Progress, RunRecord
from fitwork.workload import Kind, Pipeline, Resources, Unit, unit

__version__ = "0.1.0"

# Loaded on first use, so `import fitwork` stays light (the solver brings in SciPy).
_LAZY = {
    "decompose": "fitwork.workload.decompose",
    "explain": "fitwork.workload.decompose",
    "hint": "fitwork.workload.decompose",
    "with_context": "fitwork.workload.decompose",
    "Decomposition": "fitwork.workload.decompose",
    "DecomposeError": "fitwork.workload.decompose",
    "profile_pipeline": "fitwork.profiling",
    "PipelineProfile": "fitwork.profiling",
    "fit": "fitwork.fit.plan",
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
    "FitworkError",
    "Fleet",
    "InputError",
    "Kind",
    "Pipeline",
    "PipelineLoadError",
    "PipelineProfile",
    "Plan",
    "Progress",
    "Resources",
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
    "fit",
    "hint",
    "profile_pipeline",
    "render_report",
    "unit",
    "with_context",
]
