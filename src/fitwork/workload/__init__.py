"""Units of work and the pipelines that join them."""

from fitwork.workload.pipeline import Pipeline
from fitwork.workload.unit import Kind, Resources, Unit, unit

__all__ = ["Kind", "Pipeline", "Resources", "Unit", "unit"]
