"""`fitwork fleet simulate`, run for real in a subprocess on small fleets and traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FLEET = """\
name: tiny
node_types:
  - {name: cpu, count: 1, cores: 16, memory: 64GiB}
  - {name: gpu, count: 1, cores: 4, memory: 64GiB, devices: {V100: 1}}
"""
SMALL_FLEET = """\
name: small
node_types:
  - {name: cpu, count: 3, cores: 16, memory: 64GiB}
  - {name: v100, count: 2, cores: 8, memory: 61GiB, devices: {V100: 1}}
  - {name: k80, count: 3, cores: 4, memory: 61GiB, devices: {K80: 1}}
"""


def pipeline(pid: str, team: str, arrival: float, items: float, pre: float = 1.0,
             model: dict[str, float] | None = None) -> dict[str, Any]:
    """A pre (CPU) -> model (GPU) pipeline: ``pre`` items/s per core, ``model`` per GPU."""
    return {"id": pid, "team": team, "weight": 1, "arrival_s": arrival, "items": items,
            "units": [{"name": "pre", "rates": {"cpu-x86": pre}, "cpu": 1, "memory": "1GiB"},
                      {"name": "model", "rates": model or {"V100": 4.0}, "cpu": 1, "gpu": 1,
                       "memory": "2GiB"}]}


def simulate(tmp_path: Path, fleet: str, lines: list[dict[str, Any]] | list[str],
             policy: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI on ``fleet`` and the trace ``lines``; JSON written to out-POLICY.json."""
    (tmp_path / "fleet.yaml").write_text(fleet)
    (tmp_path / "trace.jsonl").write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return subprocess.run(
        [sys.executable, "-m", "fitwork.cli", "fleet", "simulate", "--fleet", "fleet.yaml",
         "--jobs", "trace.jsonl", "--policy", policy, "--json", f"out-{policy}.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("policy", ["fitwork", "job-level", "static"])
def test_every_pipeline_completes_once_within_capacity(tmp_path: Path, policy: str) -> None:
    k80 = {"V100": 4.0, "K80": 1.0}
    lines = [pipeline("a1", "a", 0, 400, 2.0, k80), pipeline("a2", "a", 0, 100, 0.5, k80),
             pipeline("b1", "b", 10, 300, 1.0, {"V100": 6.0}),
             pipeline("b2", "b", 10, 50, 3.0, k80), pipeline("a3", "a", 90, 200, 1.0, k80)]
    done = simulate(tmp_path, SMALL_FLEET, lines, policy)
    assert done.returncode == 0, done.stderr
    assert policy in done.stdout and "avg completion" in done.stdout
    result = json.loads((tmp_path / f"out-{policy}.json").read_text())
    assert result["completed"] == 5 and not result["unfinished"] and not result["rejected"]
    ids = [r["id"] for r in result["per_pipeline"]]
    assert sorted(ids) == ["a1", "a2", "a3", "b1", "b2"]
    for row in result["per_pipeline"]:
        assert row["finish_s"] > row["arrival_s"] and row["completion_s"] > 0
    for figures in result["utilization"].values():
        assert 0.0 <= figures["allocated_over_owned"] <= 1.0 + 1e-9
        assert 0.0 <= figures["busy_over_allocated"] <= 1.0
    assert 0.0 < result["gpu_utilization"] <= 1.0 + 1e-9
    assert 0.0 < result["jain"] <= 1.0 + 1e-9
    assert result["makespan_s"] >= max(r["finish_s"] for r in result["per_pipeline"]) - 1e-6
    assert result["refits"]["count"] >= 3 and result["refits"]["max_gap"] < 1e-4


def test_fitwork_beats_job_level_where_decode_must_leave_the_gpu_node(tmp_path: Path) -> None:
    # One pipeline: decode at 1 item/s per core, a model at 4 items/s on the one V100.
    # fitwork: the model's 4 items/s fed by 4 decoders on the CPU node: 100 items in 25 s.
    # job-level: the whole pipeline on the GPU node, whose 4 cores hold the model's (b busy
    # replicas, fluid) and 4b decoders': 5b = 4, b = 0.8: 3.2 items/s, 31.25 s, the V100
    # allocated 0.8 of the time.
    lines = [pipeline("p", "t", 0, 100)]
    fit = simulate(tmp_path, FLEET, lines, "fitwork")
    job = simulate(tmp_path, FLEET, lines, "job-level")
    assert fit.returncode == 0 and job.returncode == 0, fit.stderr + job.stderr
    ours = json.loads((tmp_path / "out-fitwork.json").read_text())
    theirs = json.loads((tmp_path / "out-job-level.json").read_text())
    assert ours["avg_completion_s"] == pytest.approx(25.0, rel=1e-6)
    assert theirs["avg_completion_s"] == pytest.approx(31.25, rel=1e-6)
    assert ours["utilization"]["V100"]["allocated_over_owned"] == pytest.approx(1.0, rel=1e-6)
    assert theirs["utilization"]["V100"]["allocated_over_owned"] == pytest.approx(0.8, rel=1e-6)


def test_a_bad_trace_line_is_one_line_naming_line_and_field(tmp_path: Path) -> None:
    bad = pipeline("q", "t", 5, 10)
    del bad["items"]
    done = simulate(tmp_path, FLEET, [pipeline("p", "t", 0, 100), bad], "fitwork")
    assert done.returncode != 0
    message = done.stderr.strip()
    assert "\n" not in message
    assert "trace.jsonl:2: items: Field required" in message


def test_an_unknown_device_class_is_named(tmp_path: Path) -> None:
    done = simulate(tmp_path, FLEET, [pipeline("p", "t", 0, 100, model={"V1000": 1.0})],
                    "static")
    assert done.returncode != 0
    assert "trace.jsonl:1: units[1].rates: unknown device class 'V1000'" in done.stderr
