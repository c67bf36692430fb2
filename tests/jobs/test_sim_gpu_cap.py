"""The fleet simulation's GPU cap: a pipeline holds at most the devices its trace line asked
for (``max_gpus``), under every policy alike; figures computed by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fitwork.hardware.fleet import Fleet
from fitwork.jobs.sim_inputs import TraceLine, load_trace, scale_cpu_cost
from fitwork.jobs.simulate import POLICIES, simulate

MIXED = """\
name: mixed
node_types:
  - {name: cpu, count: 1, cores: 16, memory: 64GiB}
  - {name: v100, count: 1, cores: 4, memory: 61GiB, devices: {V100: 1}}
  - {name: k80, count: 2, cores: 4, memory: 61GiB, devices: {K80: 1}}
"""
TWO_V100 = """\
name: two
node_types:
  - {name: cpu, count: 1, cores: 16, memory: 64GiB}
  - {name: v100, count: 2, cores: 4, memory: 61GiB, devices: {V100: 1}}
"""


def fleet_of(tmp_path: Path, text: str) -> Fleet:
    """The fleet written in ``text``."""
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return Fleet.from_yaml(path)


def line(items: float, max_gpus: float | None) -> TraceLine:
    """pre: 1,000 items/s per core (never short); model: 4 items/s on a V100, 1 on a K80."""
    return TraceLine.model_validate({
        "id": "p", "arrival_s": 0, "items": items, "max_gpus": max_gpus, "units": [
            {"name": "pre", "rates": {"cpu-x86": 1000}, "cpu": 1},
            {"name": "model", "rates": {"V100": 4, "K80": 1}, "cpu": 1, "gpu": 1}]})


@pytest.mark.parametrize("policy", POLICIES)
def test_a_pipeline_that_asked_for_one_gpu_gets_one(tmp_path: Path, policy: str) -> None:
    # Two V100s, a pipeline that asked for 1: 4 items/s, 400 items in 100 s, half the GPUs
    # busy. Without the cap every policy gave it both: 8 items/s, 50 s.
    fleet = fleet_of(tmp_path, TWO_V100)
    capped = simulate(fleet, [line(400, 1)], policy)  # type: ignore[arg-type]
    free = simulate(fleet, [line(400, 1)], policy, gpu_cap=False)  # type: ignore[arg-type]
    assert capped["avg_completion_s"] == pytest.approx(100.0, rel=1e-6)
    assert capped["gpu_utilization"] == pytest.approx(0.5, rel=1e-6)
    assert free["avg_completion_s"] == pytest.approx(50.0, rel=1e-6)
    assert capped["normalized_throughput"]["p50"] == pytest.approx(1.0, rel=1e-6)


def test_the_cap_counts_devices_of_every_class_together(tmp_path: Path) -> None:
    # One V100 and two K80s, a pipeline that asked for 2 GPUs, 500 items. fitwork: the V100
    # and one K80 (4 + 1 = 5 items/s), 100 s; uncapped it took all three (6 items/s, 83.3 s).
    # job-level, one type at a time: time a on the V100 (4a) and 1 - a on both K80s
    # (2(1 - a)); best a = 1: 4 items/s, 125 s, the cap not binding.
    fleet = fleet_of(tmp_path, MIXED)
    got = {(p, cap): simulate(fleet, [line(500, 2)], p, gpu_cap=cap)  # type: ignore[arg-type]
           for p in ("fitwork", "job-level", "job-level-fluid") for cap in (True, False)}
    assert got[("fitwork", True)]["avg_completion_s"] == pytest.approx(100.0, rel=1e-6)
    assert got[("fitwork", True)]["gpu_allocated"] == pytest.approx(2 / 3, rel=1e-6)
    assert got[("fitwork", False)]["avg_completion_s"] == pytest.approx(500 / 6, rel=1e-6)
    for policy in ("job-level", "job-level-fluid"):
        for cap in (True, False):
            assert got[(policy, cap)]["avg_completion_s"] == pytest.approx(125.0, rel=1e-6)


def test_cpu_cost_sweep_divides_only_cpu_rates() -> None:
    base = line(10, 1)
    doubled = scale_cpu_cost([base], 2.0)[0]
    assert doubled.units[0].rates == {"cpu-x86": 500.0}
    assert doubled.units[1].rates == base.units[1].rates
    with pytest.raises(ValueError, match="CPU cost factor"):
        scale_cpu_cost([base], 0.0)


def test_the_shipped_trace_caps_each_pipeline_at_its_philly_scale_factor() -> None:
    from fitwork.jobs.trace import shipped_trace
    lines = load_trace(shipped_trace())
    caps = {ln.max_gpus for ln in lines}
    assert caps == {1, 2, 4, 8, 16, 32}
    assert all(ln.items % ln.max_gpus == 0 for ln in lines if ln.max_gpus)  # steps x scale


def test_the_cli_reads_max_gpus(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(TWO_V100)
    (tmp_path / "trace.jsonl").write_text(line(400, 1).model_dump_json() + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "fitwork.cli", "fleet", "simulate", "--fleet", "fleet.yaml",
         "--jobs", "trace.jsonl", "--policy", "fitwork", "--json", "out.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["avg_completion_s"] == pytest.approx(100.0, rel=1e-6)


def test_whole_replicas_give_every_capped_pipeline_a_gpu_within_its_cap() -> None:
    # The first 20 pipelines of the shipped trace on a tenth of the bench's fleet (80 GPUs),
    # each capped at its scale factor, rounded to whole replicas. The fluid plan splits
    # pipeline 0e4a51-1 (cap 1) between a K80 and an A100; rounding drops both where the
    # pools overflow, and a unit floored to nothing was refilled only for jobs without a
    # quota: 8 of the 20 got nothing. Now each is refilled within its cap.
    from dataclasses import replace

    from fitwork.jobs.cofit import JobSpec, alone_rates, cofit
    from fitwork.jobs.sim_inputs import GPUS, pools, shape_of
    from fitwork.jobs.trace import shipped_trace

    big = Fleet.from_yaml(Path(str(shipped_trace())).with_name("philly_fleet.yaml"))
    fleet = big.model_copy(update={"node_types": [
        n.model_copy(update={"count": max(1, n.count // 10)}) for n in big.node_types]})
    lines = load_trace(shipped_trace())[::10][:20]
    fleet_pools = pools(fleet)
    specs, offers, alone = [], [], []
    for p, ln in enumerate(lines):
        shape = shape_of(ln, fleet)
        specs.append(JobSpec(ln.id, shape.multiplicity, ln.weight, quota=shape.quota))
        offers += [replace(o, job=p) for o in shape.offers]
        alone += alone_rates([specs[-1]], list(shape.offers), fleet_pools, integral=False)
    plan = cofit(specs, offers, fleet_pools, alone=alone, integral=False, time_limit=10.0,
                 mip_gap=1e-4)
    assert all(job.status == "admitted" and job.rate > 0 for job in plan.jobs)
    for job, ln in zip(plan.jobs, lines, strict=True):
        assert job.use.get(GPUS, 0.0) <= (ln.max_gpus or 0) + 1e-9
