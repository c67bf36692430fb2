"""A fleet plan on a busy host counts on what every job's threads get together, not what
one process met while profiling (issue 36: plans that shrink on a busy host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitwork.fit.ceiling import core_ceiling, share_ceiling
from fitwork.jobs.ceiling import busy_threads, fleet_share, session_cap
from fitwork.jobs.plan import FleetPlan, plan_jobs
from fitwork.jobs.spec import Job, JobsFile
from fitwork.profiling.record import BatchMeasurement, PipelineProfile, UnitProfile
from tests.fit.test_fluid import TWO_CORES

BUSY = {1: [0.34], 2: [0.55], 4: [0.80], 8: [0.90]}
"""What k processes got of 2 cores beside a job keeping about one core busy (made up in
the shape `fitwork.profiling.shares` reads: each more process gets more of the host)."""
FLAT = {k: [0.34] for k in BUSY}
"""The same host where more processes got no more than one (the others not shared)."""


def profile(name: str, cpu: float, shares: dict[int, list[float]]) -> PipelineProfile:
    """A CPU-bound two-unit pipeline of ``cpu`` seconds per item per unit, profiled beside
    the load ``shares`` describes (one process waited about two-thirds of its time)."""
    def measured(unit: str) -> UnitProfile:
        return UnitProfile(name=unit, kind="map", resources={"cpu": 1.0},
                           device_class="cpu-x86", samples=32, wall_s=3 * cpu, cpu_s=cpu,
                           queued_s=2 * cpu, bytes_in=100.0, bytes_out=100.0,
                           output_ratio=1.0, peak_rss=20 << 20, parallelism=1.0)

    return PipelineProfile(fitwork_version="test", pipeline=name, host_class="cpu-x86",
                           created_at=0.0, share_readings=shares,
                           units=[measured(f"{name}_a"), measured(f"{name}_b")])


def jobs(tmp_path: Path) -> JobsFile:
    return JobsFile(jobs=[
        Job(name=n, pipeline=f"p.py:{n}", input=tmp_path / f"{n}.jsonl",
            output=tmp_path / f"{n}.out.jsonl", weight=w)
        for n, w in (("scoring", 2.0), ("tokens", 1.0), ("lookup", 1.0))])


def plan_on(tmp_path: Path, shares: dict[int, list[float]]
            ) -> tuple[FleetPlan, dict[str, PipelineProfile]]:
    profiles = {"scoring": profile("scoring", 0.004, shares),
                "tokens": profile("tokens", 0.002, shares),
                "lookup": profile("lookup", 0.003, shares)}
    return plan_jobs(jobs(tmp_path), TWO_CORES, profiles=profiles, time_limit=5.0), profiles


def cores_held(plan: FleetPlan) -> float:
    return sum(j.held.get("cores", 0.0) for j in plan.jobs)


def test_the_fleet_plan_counts_on_what_its_threads_get_together(tmp_path: Path) -> None:
    plan, profiles = plan_on(tmp_path, BUSY)
    one = max(core_ceiling(p.under_load()) for p in profiles.values())
    assert one < 0.35  # what one process met: 0.68 of 2 cores for all three jobs
    assert fleet_share(list(profiles.values()), 1) == 0.34
    held = cores_held(plan)
    threads = sum(g.replicas * (g.threads or 1) for j in plan.jobs for g in j.replicas
                  if g.cores >= 0.05)
    print(f"cores held {held:.2f} by {threads} threads; one-process budget {2 * one:.2f}")
    assert all(j.status == "admitted" for j in plan.jobs)
    assert held > 2 * one + 0.2  # more than the one-process budget allows
    # ... and no more than what the plan's own threads get (it bears its ceiling out)
    assert held <= 2 * fleet_share(list(profiles.values()), threads) + 1e-6
    assert fleet_share(list(profiles.values()), threads) == share_ceiling(
        profiles["scoring"].under_load(), threads)


def test_where_more_processes_get_no_more_the_plan_keeps_the_one_process_budget(
        tmp_path: Path) -> None:
    plan, profiles = plan_on(tmp_path, FLAT)
    one = fleet_share(list(profiles.values()), 1)  # what one process got
    assert one == 0.34
    assert cores_held(plan) <= 2 * one + 1e-6


def test_busy_threads_counts_cpu_replicas_that_compute(tmp_path: Path) -> None:
    plan, _ = plan_on(tmp_path, BUSY)
    options = [j.options for j in plan.jobs]
    flat = [o for opts in options for o in opts]
    x = [0.0] * len(flat)
    f = [0.0] * len(flat)
    x[0], f[0] = 2.0, 100.0  # two replicas carrying 100 items/s: busy
    x[1], f[1] = 1.0, 1e-6  # one replica that mostly waits: no thread competing
    assert flat[0].cpu_per_item * 100.0 / 2 >= 0.05
    assert busy_threads(options, x, f) == 2 * (flat[0].threads or 1)


def beside_a_spinner(name: str, cpu: float) -> PipelineProfile:
    """A profile whose pass read that others used half of the host (one core of two kept
    busy), and where more processes got more (the thread rule alone would plan it all)."""
    busy = profile(name, cpu, BUSY)
    units = [u.model_copy(update={"batches": [BatchMeasurement(
        batch_size=1, items=32, wall_s=32 * u.wall_s, cpu_s=32 * u.cpu_s,
        queued_s=32 * u.queued_s, others_readings=[0.5, 0.5])]}) for u in busy.units]
    return busy.model_copy(update={"units": units})


def test_sessions_weighed_as_groups_cap_what_the_jobs_get_beside_the_others() -> None:
    spun = [beside_a_spinner("a", 0.004)]
    # beside one busy session, sessions weighted 2:1:1 weigh 2 of 3: the others get 1/3
    assert session_cap(spun, [2.0, 1.0, 1.0]) == pytest.approx(2 / 3)
    assert session_cap(spun, [1.0, 1.0, 1.0]) == pytest.approx(0.75)
    # others that use less than their weight's share keep only what they use
    assert session_cap(spun, [1.0] * 9) == pytest.approx(0.9)
    assert session_cap([profile("quiet", 0.004, {})], [2.0, 1.0]) == 1.0  # nothing read


def test_a_host_plan_under_the_autogroup_lever_counts_on_its_sessions_share(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiles = {"scoring": beside_a_spinner("scoring", 0.004),
                "tokens": beside_a_spinner("tokens", 0.002),
                "lookup": beside_a_spinner("lookup", 0.003)}
    monkeypatch.setenv("FITWORK_SHARE_LEVER", "autogroup")
    held = cores_held(plan_jobs(jobs(tmp_path), TWO_CORES, profiles=profiles, time_limit=5.0))
    assert held == pytest.approx(2 * 2 / 3, rel=1e-3)  # the sessions' share, all of it
    monkeypatch.setenv("FITWORK_SHARE_LEVER", "none")  # no sessions weighed: the threads'
    threads_rule = cores_held(plan_jobs(jobs(tmp_path), TWO_CORES, profiles=profiles,
                                        time_limit=5.0))
    assert threads_rule >= held - 1e-6 and threads_rule != pytest.approx(held, rel=1e-3)
