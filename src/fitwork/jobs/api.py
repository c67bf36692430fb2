"""`fitwork.plan_jobs` and `fitwork.run_many`: many pipelines on one fleet, from Python."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fitwork.hardware.fleet import Fleet
from fitwork.jobs.plan import FleetObjective, FleetPlan
from fitwork.jobs.plan import plan_jobs as _plan_jobs
from fitwork.jobs.record import FleetRecord
from fitwork.jobs.run import run_many as _run_many
from fitwork.jobs.spec import Job, JobsFile, JobsFileError, load_jobs
from fitwork.profiling.record import PipelineProfile

__all__ = ["plan_jobs", "profiler", "run_many"]

Jobs = str | Path | JobsFile | Sequence[Mapping[str, Any]]


def jobs_of(jobs: Jobs) -> JobsFile:
    """A jobs file read from a path, given, or made from job entries (paths in them relative
    to the current directory)."""
    if isinstance(jobs, JobsFile):
        return jobs
    if isinstance(jobs, str | Path):
        return load_jobs(jobs)
    from pydantic import ValidationError

    from fitwork.hardware.validation import one_line

    try:
        return JobsFile.model_validate({"jobs": [dict(j) for j in jobs]})
    except ValidationError as exc:
        raise JobsFileError(f"jobs: {one_line(exc)}") from None


def profiler(samples: int, say: Callable[[str], None] | None = None
             ) -> Callable[[Job], PipelineProfile]:
    """Profile a job on the spot, as `fitwork profile` would (its first items as samples),
    saying so through ``say``."""
    def profile_job(job: Job) -> PipelineProfile:
        from fitwork.io.inputs import read_items
        from fitwork.profiling import profile_pipeline
        from fitwork.workload.loader import load_pipeline

        if say is not None:
            say(f"{job.name}: profiling {job.pipeline} on {job.input} (no profile: given)")
        return profile_pipeline(load_pipeline(job.pipeline), read_items(job.input),
                                samples=samples)
    return profile_job


def plan_jobs(jobs: Jobs, fleet: Fleet | None = None, *, objective: FleetObjective = "fair",
              samples: int = 32, time_limit: float = 10.0) -> FleetPlan:
    """Fit every pipeline of ``jobs`` to ``fleet`` (this host by default) together; jobs
    without a ``profile`` are profiled on ``samples`` of their input's items."""
    from fitwork.hardware.discover import discover_local

    return _plan_jobs(jobs_of(jobs), fleet or discover_local(), objective=objective,
                      profile_job=profiler(samples), time_limit=time_limit)


def run_many(jobs: Jobs, plan: FleetPlan | str | Path | None = None, *,
             engine: str = "local", resume: bool = False, ray_address: str | None = None,
             record: str | Path | None = None) -> FleetRecord:
    """Run every pipeline of ``jobs`` at once, each its own `fitwork run` process with its
    own output, journal, dead letters and record; with ``plan`` (a fleet plan or its file)
    re-fitted as they arrive and finish.  Returns the fleet record (saved to ``record``)."""
    if isinstance(plan, str | Path):
        plan = FleetPlan.load(plan)
    result = _run_many(jobs_of(jobs), plan, engine=engine, resume=resume,
                       ray_address=ray_address)
    if record is not None:
        result.save(record)
    return result
