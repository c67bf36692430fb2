"""Units of work and the pipelines that join them."""

from fitwork.resources import Resources
from fitwork.workload.pipeline import Pipeline
from fitwork.workload.retry import Retry
from fitwork.workload.unit import Kind, Unit, unit

__all__ = ["Kind", "Pipeline", "Resources", "Retry", "Unit", "unit"]
