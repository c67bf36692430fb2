"""fitwork: break a workload into units, fit each to the silicon that suits it, run, measure."""

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

__all__ = [
    "EngineError",
    "FitworkError",
    "InputError",
    "Kind",
    "Pipeline",
    "PipelineLoadError",
    "Progress",
    "Resources",
    "RunOptions",
    "RunRecord",
    "RunResult",
    "TooManyFailures",
    "Unit",
    "UnitDefinitionError",
    "__version__",
    "unit",
]
