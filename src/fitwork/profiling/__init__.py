"""Measure what each unit costs per item on this host."""

from fitwork.profiling.profiler import profile_pipeline
from fitwork.profiling.record import BatchMeasurement, PipelineProfile, UnitProfile

__all__ = ["BatchMeasurement", "PipelineProfile", "UnitProfile", "profile_pipeline"]
