"""Measure what each unit costs per item on this host, on the device classes it runs on."""

from fitwork.profiling.profiler import profile_pipeline
from fitwork.profiling.record import BatchMeasurement, PipelineProfile, UnitProfile
from fitwork.profiling.timers import accelerator_clock, register_timer

__all__ = ["BatchMeasurement", "PipelineProfile", "UnitProfile", "accelerator_clock",
           "profile_pipeline", "register_timer"]
