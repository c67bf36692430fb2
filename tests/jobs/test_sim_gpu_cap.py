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
