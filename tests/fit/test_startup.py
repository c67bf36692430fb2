"""A unit that is slow to build (a model to load): its replicas' build is measured by the
profile, kept apart from their work in the run record, and a short run is predicted with it."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fitwork.fit.plan import Plan
from fitwork.telemetry.record import RunRecord

BUILD_S = 0.5

PIPELINE = textwrap.dedent(f"""
    import time

    from fitwork import Pipeline, unit


    def spin(seconds):
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass


    @unit
    class Model:
        '''Loads for {BUILD_S} s of CPU, then 2 ms of CPU per row.'''

        def __init__(self):
            spin({BUILD_S})

        def __call__(self, row):
            spin(0.002)
            return {{"n": row["n"], "score": row["n"] * 2}}


    pipeline = Pipeline(Model, name="slow_build")
""")


def fitwork(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fitwork.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


def test_a_slow_build_is_profiled_kept_apart_in_the_record_and_priced_into_a_short_run(
        tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(PIPELINE)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(120)))
    steps = [("profile", "slow.py:pipeline", "--input", "in.jsonl", "--samples", "16",
              "-o", "prof.json"),
             ("plan", "slow.py:pipeline", "--profile", "prof.json", "-o", "plan.json"),
             ("run", "slow.py:pipeline", "--input", "in.jsonl", "--output", "o.jsonl",
              "--plan", "plan.json", "--record", "r.json", "-q")]
    done = [fitwork(*step, cwd=tmp_path) for step in steps]
    for step in done:
        assert step.returncode == 0, step.stderr + step.stdout
    plan = Plan.load(tmp_path / "plan.json")
    assert BUILD_S * 0.8 <= plan.build_cpu_s["Model"] <= BUILD_S * 2

    record = RunRecord.load(tmp_path / "r.json")
    assert record.items_completed == 120
    for worker in record.workers:  # its build apart; its work about 2 ms a row
        assert worker.build_cpu_s >= BUILD_S * 0.8, worker
        assert worker.cpu_s <= 0.002 * worker.items_in * 3 + 0.1, worker
    (unit,) = record.units
    assert unit.build_cpu_s == sum(w.build_cpu_s for w in record.workers)

    said = " ".join(done[-1].stdout.split())
    predicted = re.search(r"plan predicted ([\d,.]+) items/s .* over a run of 120 items "
                          r"\(([\d,.]+) steady", said)
    assert predicted, said
    run_rate, steady = (float(predicted.group(i).replace(",", "")) for i in (1, 2))
    assert run_rate == plan.run_rate(120) or math.isclose(run_rate, plan.run_rate(120),
                                                          rel_tol=0.01)
    startup, _ = plan.run_overhead()
    assert startup >= BUILD_S * 0.8
    # builds of half a second against 0.24 s of rows: the run's prediction is the nearer
    realized = record.throughput
    assert abs(math.log(realized / run_rate)) < abs(math.log(realized / steady)), \
        (realized, run_rate, steady)


def test_on_ray_a_replica_s_build_is_kept_apart_from_its_work(tmp_path: Path,
                                                              ray_cluster: Any) -> None:
    (tmp_path / "slow.py").write_text(PIPELINE)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(40)))
    done = fitwork("run", "slow.py:pipeline", "--input", "in.jsonl", "--output", "o.jsonl",
                   "--engine", "ray", "--ray-address", ray_cluster.address, "--record",
                   "r.json", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    record = RunRecord.load(tmp_path / "r.json")
    assert record.items_completed == 40
    for worker in record.workers:  # the actor's build apart; its work about 2 ms a row
        assert worker.build_cpu_s >= BUILD_S * 0.8, worker
        assert worker.cpu_s <= 0.002 * worker.items_in * 3 + 0.2, worker


def test_a_short_run_is_charged_the_engine_s_start_of_each_replica() -> None:
    from fitwork.fit.plan import plan_for
    from fitwork.fit.startup import REPLICA_START_S, RUN_START_S, startup_seconds
    from tests.fit.test_fluid import TWO_CORES
    from tests.fit.test_plan import synthetic_profile

    cpu_only = synthetic_profile()
    cpu_only.units[1].resources.pop("gpu")
    built = cpu_only.model_copy(update={"units": [
        u.model_copy(update={"build_cpu_s": 0.3, "build_wall_s": 0.35}) if u.name == "model"
        else u for u in cpu_only.units]})
    for profile, builds in ((cpu_only, False), (built, True)):
        plan = plan_for(profile, TWO_CORES)
        for side in ("fitted", "monolithic"):
            groups = plan.placement(side=side).groups
            replicas = sum(g.replicas for g in groups)
            assert replicas >= 1
            engine = RUN_START_S + REPLICA_START_S * replicas
            start = startup_seconds(plan, side)
            if not builds:  # the engine's start alone
                assert start == engine
            else:  # the builds after it: the longest, or their CPU over the two cores
                assert start >= engine + 0.35 - 1e-9
            # and a run of a handful of items is judged with it, not at the steady rate
            steady = (plan.fitted if side == "fitted" else plan.monolithic).throughput
            assert plan.run_overhead(side)[0] == start
            first = plan.run_overhead(side)[1]
            assert plan.run_rate(8, side) == pytest.approx(8 / (start + first + 7 / steady))
