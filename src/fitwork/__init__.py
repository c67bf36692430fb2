"""fitwork: break a workload into units, fit each to the silicon that suits it, run, measure."""

from __future__ import annotations

from typing import Any

from fitwork.engine.contract import RunResult
from fitwork.engine.options import RunOptions
from fitwork.engine.parts import Sink
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
from fitwork.shards import Source
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
    "plan_llm": "fitwork.llm",
    "simulate_llm": "fitwork.llm:simulate",
    "load_trace": "fitwork.llm",
    "LLMPlan": "fitwork.llm",
    "SLO": "fitwork.llm",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, _, attribute = _LAZY[name].partition(":")
        return getattr(importlib.import_module(module), attribute or name)
    raise AttributeError(f"module 'fitwork' has no attribute {name!r}")


__all__ = [
    "SLO",
    "DecomposeError",
    "Decomposition",
    "EngineError",
    "Failure",
    "FitworkError",
    "Fleet",
    "Group",
    "InputError",
    "Kind",
    "LLMPlan",
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
    "Sink",
    "Source",
    "TooManyFailures",
    "Unit",
    "UnitDefinitionError",
    "__version__",
    "catalog",
    "decompose",
    "discover_local",
    "explain",
    "hint",
    "load_trace",
    "plan_for",
    "plan_llm",
    "profile_pipeline",
    "render_report",
    "run",
    "simulate_llm",
    "unit",
    "with_context",
]
