"""What `fitwork plan --jobs` and `fitwork run --jobs` do once their flags are parsed."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from fitwork.commands.common import Terminated, fail, on_sigterm
from fitwork.errors import FitworkError
from fitwork.jobs.spec import load_jobs

__all__ = ["plan_jobs_command", "run_jobs_command"]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def plan_jobs_command(jobs_path: Path, fleet_ref: str, objective: str | None,
                      time_limit: float, output: Path, samples: int = 32) -> None:
    """Plan every job of the jobs file together, print it and save it."""
    from fitwork.hardware.discover import discover_local
    from fitwork.hardware.fleet import Fleet
    from fitwork.jobs.api import profiler
    from fitwork.jobs.plan import plan_jobs

    chosen = objective or "fair"
    if chosen not in ("fair", "max_throughput", "min_cost"):
        fail(f"--objective {chosen} with --jobs: a fleet plan takes fair, max_throughput or "
             "min_cost", code=2)
    try:
        jobs = load_jobs(jobs_path)
        fleet = discover_local() if fleet_ref == "local" else Fleet.from_yaml(fleet_ref)
        sys.path.insert(0, str(jobs_path.resolve().parent))
        plan = plan_jobs(jobs, fleet, objective=chosen,  # type: ignore[arg-type]
                         profile_job=profiler(samples, _say),
                         time_limit=time_limit, say=_say)
    except FitworkError as exc:
        fail(exc)
    plan.save(output)
    for line in plan.lines():
        print(line)
    print(f"wrote fleet plan to {output}")


def run_jobs_command(jobs_path: Path, plan_path: Path | None, engine: str, resume: bool,
                     ray_address: str | None, record: Path | None) -> None:
    """Run every job of the jobs file at once; exit 1 if any failed."""
    from fitwork.jobs.plan import FleetPlan
    from fitwork.jobs.run import run_many

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        jobs = load_jobs(jobs_path)
        plan = FleetPlan.load(plan_path) if plan_path else None
        if plan is not None:
            missing = sorted({j.name for j in jobs.jobs} - {j.name for j in plan.jobs})
            if missing:
                fail(f"fleet plan {plan_path} has no job {', '.join(missing)}: plan "
                     f"{jobs_path} again (fitwork plan --jobs {jobs_path})", code=2)
        if engine == "ray" and not ray_address:
            import os

            ray_address = os.environ.get("RAY_ADDRESS")
            if not ray_address:
                fail("--jobs on --engine ray runs every pipeline on one cluster: give "
                     "--ray-address (start one with `ray start --head`)", code=2)
        result = run_many(jobs, plan, engine=engine, resume=resume, ray_address=ray_address,
                          say=_say)
    except FitworkError as exc:
        fail(exc)
    except KeyboardInterrupt as stop:
        fail("interrupted: every pipeline stopped with its journal kept; run again with "
             "--resume to continue each where it stopped",
             code=143 if isinstance(stop, Terminated) else 130)
    for line in result.lines():
        print(line)
    if record is not None:
        result.save(record)
        print(f"wrote fleet record to {record}")
    if result.exit_code:
        sys.exit(result.exit_code)
