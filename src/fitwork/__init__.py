"""fitwork: break a workload into units, fit each to the silicon that suits it, run, measure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fitwork.version import __version__

if TYPE_CHECKING:  # what checkers see; at run time each name loads on first use
    from fitwork.decomposition import (
        DecomposeError,
        Decomposition,
        decompose,
        explain,
        hint,
        with_context,
    )
    from fitwork.engine.contract import RunResult
    from fitwork.engine.options import RunOptions
    from fitwork.engine.parts import Sink
    from fitwork.engine.ray.warm import release_warm
    from fitwork.errors import (
        EngineError,
        FitworkError,
        InputError,
        PipelineLoadError,
        TooManyFailures,
        UnitDefinitionError,
    )
    from fitwork.failure import Failure
    from fitwork.fit.plan import Plan, plan_for
    from fitwork.hardware.catalog import catalog
    from fitwork.hardware.discover import discover_local
    from fitwork.hardware.fleet import Fleet
    from fitwork.io.shards import Source
    from fitwork.io.writers import OutputDigest
    from fitwork.jobs.api import plan_jobs, run_many
    from fitwork.jobs.plan import FleetPlan
    from fitwork.jobs.record import FleetRecord
    from fitwork.llm import SLO, LLMPlan, load_trace, plan_llm, simulate_llm
    from fitwork.placement import Group, Placement
    from fitwork.profiling import PipelineProfile, profile_pipeline
    from fitwork.profiling.marked import profiling_now
    from fitwork.profiling.onnx import count_onnx
    from fitwork.report.fleet import render_fleet_report
    from fitwork.report.html import render_report
    from fitwork.report.verdict import Headline
    from fitwork.resources import Resources
    from fitwork.runner import run
    from fitwork.telemetry.record import Progress, RunRecord
    from fitwork.telemetry.utilization import RunFigures, run_figures
    from fitwork.workload import Kind, Pipeline, Retry, Unit, unit

# Every public name loads on first use: `import fitwork` is cheap, and so is a replica
# process that imports one engine module (the package is imported first, by Python).
_LAZY = {
    "RunResult": "fitwork.engine.contract",
    "RunOptions": "fitwork.engine.options",
    "Sink": "fitwork.engine.parts",
    "release_warm": "fitwork.engine.ray.warm",
    "EngineError": "fitwork.errors",
    "FitworkError": "fitwork.errors",
    "InputError": "fitwork.errors",
    "PipelineLoadError": "fitwork.errors",
    "TooManyFailures": "fitwork.errors",
    "UnitDefinitionError": "fitwork.errors",
    "Failure": "fitwork.failure",
    "Group": "fitwork.placement",
    "Placement": "fitwork.placement",
    "Resources": "fitwork.resources",
    "run": "fitwork.runner",
    "Source": "fitwork.io.shards",
    "Progress": "fitwork.telemetry.record",
    "RunRecord": "fitwork.telemetry.record",
    "Kind": "fitwork.workload",
    "Pipeline": "fitwork.workload",
    "Retry": "fitwork.workload",
    "Unit": "fitwork.workload",
    "unit": "fitwork.workload",
    "decompose": "fitwork.decomposition",
    "explain": "fitwork.decomposition",
    "hint": "fitwork.decomposition",
    "with_context": "fitwork.decomposition",
    "Decomposition": "fitwork.decomposition",
    "DecomposeError": "fitwork.decomposition",
    "profile_pipeline": "fitwork.profiling",
    "PipelineProfile": "fitwork.profiling",
    "profiling_now": "fitwork.profiling.marked",
    "plan_for": "fitwork.fit.plan:plan_for",
    "Plan": "fitwork.fit.plan",
    "Fleet": "fitwork.hardware.fleet",
    "plan_jobs": "fitwork.jobs.api",
    "run_many": "fitwork.jobs.api",
    "FleetPlan": "fitwork.jobs.plan",
    "FleetRecord": "fitwork.jobs.record",
    "discover_local": "fitwork.hardware.discover",
    "catalog": "fitwork.hardware.catalog",
    "render_report": "fitwork.report.html",
    "render_fleet_report": "fitwork.report.fleet",
    # what a program that measures its runs needs beside `run` (the demo is one): the
    # outputs' digest, the run's figures and the verdict a report states, ONNX FLOPs
    "OutputDigest": "fitwork.io.writers",
    "RunFigures": "fitwork.telemetry.utilization",
    "run_figures": "fitwork.telemetry.utilization",
    "Headline": "fitwork.report.verdict",
    "count_onnx": "fitwork.profiling.onnx",
    "plan_llm": "fitwork.llm",
    "simulate_llm": "fitwork.llm",
    "load_trace": "fitwork.llm",
    "LLMPlan": "fitwork.llm",
    "SLO": "fitwork.llm",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, _, attribute = _LAZY[name].partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        globals()[name] = value  # found once: later lookups are plain attribute reads
        return value
    raise AttributeError(f"module 'fitwork' has no attribute {name!r}")


__all__ = [
    "SLO",
    "DecomposeError",
    "Decomposition",
    "EngineError",
    "Failure",
    "FitworkError",
    "Fleet",
    "FleetPlan",
    "FleetRecord",
    "Group",
    "Headline",
    "InputError",
    "Kind",
    "LLMPlan",
    "OutputDigest",
    "Pipeline",
    "PipelineLoadError",
    "PipelineProfile",
    "Placement",
    "Plan",
    "Progress",
    "Resources",
    "Retry",
    "RunFigures",
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
    "count_onnx",
    "decompose",
    "discover_local",
    "explain",
    "hint",
    "load_trace",
    "plan_for",
    "plan_jobs",
    "plan_llm",
    "profile_pipeline",
    "profiling_now",
    "release_warm",
    "render_fleet_report",
    "render_report",
    "run",
    "run_figures",
    "run_many",
    "simulate_llm",
    "unit",
    "with_context",
]
