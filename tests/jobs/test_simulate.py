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


POLICIES = ["fitwork", "job-level", "static", "job-level-fluid", "static-fluid"]


@pytest.mark.parametrize("policy", POLICIES)
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
        assert 0.0 <= figures["busy_over_allocated"] <= 1.0 + 1e-9
        assert figures["busy_over_owned"] == pytest.approx(
            figures["busy_over_allocated"] * figures["allocated_over_owned"], abs=1e-9)
    assert 0.0 < result["gpu_utilization"] <= result["gpu_allocated"] + 1e-9 <= 1.0 + 2e-9
    assert 0.0 < result["jain"] <= 1.0 + 1e-9
    assert result["makespan_s"] >= max(r["finish_s"] for r in result["per_pipeline"]) - 1e-6
    assert result["refits"]["count"] >= 3 and result["refits"]["max_gap"] < 1e-4
    assert result["bundled"] == (policy in ("job-level", "static"))


def test_fitwork_beats_job_level_where_decode_must_leave_the_gpu_node(tmp_path: Path) -> None:
    # One pipeline: decode at 1 item/s per core, a model at 4 items/s on the one V100.
    # fitwork: the model's 4 items/s fed by 4 decoders on the CPU node: 100 items in 25 s.
    # job-level-fluid: the whole pipeline on the GPU node, whose 4 cores hold the model's
    # (b busy replicas, fluid) and 4b decoders': 5b = 4, b = 0.8: 3.2 items/s, 31.25 s, the
    # V100 allocated 0.8 of the time. job-level (a bundle: the V100 and the node's 4 cores):
    # the same 3.2 items/s, but the V100 is held all the time and busy 0.8 of it.
    lines = [pipeline("p", "t", 0, 100)]
    got = {}
    for policy in ("fitwork", "job-level-fluid", "job-level"):
        done = simulate(tmp_path, FLEET, lines, policy)
        assert done.returncode == 0, done.stderr
        got[policy] = json.loads((tmp_path / f"out-{policy}.json").read_text())
    ours, fluid, bundle = got["fitwork"], got["job-level-fluid"], got["job-level"]
    assert ours["avg_completion_s"] == pytest.approx(25.0, rel=1e-6)
    assert fluid["avg_completion_s"] == pytest.approx(31.25, rel=1e-6)
    assert bundle["avg_completion_s"] == pytest.approx(31.25, rel=1e-6)
    assert ours["utilization"]["V100"]["allocated_over_owned"] == pytest.approx(1.0, rel=1e-6)
    assert fluid["utilization"]["V100"]["allocated_over_owned"] == pytest.approx(0.8, rel=1e-6)
    assert bundle["utilization"]["V100"]["allocated_over_owned"] == pytest.approx(1.0, rel=1e-6)
    assert bundle["utilization"]["V100"]["busy_over_allocated"] == pytest.approx(0.8, rel=1e-6)


# Hand-checked bundle: pre needs 4 cores to feed one V100 (1 item/s per core against the
# model's 4 items/s; the model's replica holds no core), the GPU node type has 2 cores per
# GPU. A bundle (the V100 and the node's 2 cores) runs at min(4, 2 / 1) = 2 items/s: the
# V100 held all the time and busy 2/4 = 0.5 of it, 200 items in 100 s. fitwork puts the pre
# replicas on the CPU node type: 4 items/s, 50 s, the V100 busy whenever it is held.
HAND_FLEET = """\
name: hand
node_types:
  - {name: cpu, count: 1, cores: 16, memory: 64GiB}
  - {name: gpu, count: 1, cores: 2, memory: 16GiB, devices: {V100: 1}}
"""


def hand_pipeline(pid: str, team: str, arrival: float, items: float) -> dict[str, Any]:
    """pre: 1 item/s per one-core replica; model: 4 items/s on a V100, holding no core."""
    line = pipeline(pid, team, arrival, items)
    line["units"][1]["cpu"] = 0
    return line


def test_a_bundle_short_of_cores_idles_its_gpu_and_fitwork_does_not(tmp_path: Path) -> None:
    got = {}
    for policy in ("fitwork", "job-level", "static", "job-level-fluid"):
        done = simulate(tmp_path, HAND_FLEET, [hand_pipeline("p", "t", 0, 200)], policy)
        assert done.returncode == 0, done.stderr
        got[policy] = json.loads((tmp_path / f"out-{policy}.json").read_text())
    for policy in ("job-level", "static"):  # one team: its slice is the whole fleet
        v100 = got[policy]["utilization"]["V100"]
        assert v100["busy_over_allocated"] == pytest.approx(0.5, rel=1e-6)
        assert v100["allocated_over_owned"] == pytest.approx(1.0, rel=1e-6)
        assert got[policy]["gpu_utilization"] == pytest.approx(0.5, rel=1e-6)
        assert got[policy]["avg_completion_s"] == pytest.approx(100.0, rel=1e-6)
        cpu = got[policy]["utilization"]["cpu-x86"]  # the bundle's 2 cores, both busy
        assert cpu["allocated_over_owned"] == pytest.approx(2 / 18, rel=1e-6)
        assert cpu["busy_over_allocated"] == pytest.approx(1.0, rel=1e-6)
    ours = got["fitwork"]
    assert ours["utilization"]["V100"]["busy_over_allocated"] == pytest.approx(1.0, rel=1e-6)
    assert ours["gpu_utilization"] == pytest.approx(1.0, rel=1e-6)
    assert ours["avg_completion_s"] == pytest.approx(50.0, rel=1e-6)
    # Fluid (not a bundle), job-level sizes the model's replicas to the 2 cores' pre: the
    # V100 allocated half the time, busy whenever allocated: what a bundle must not show.
    fluid = got["job-level-fluid"]["utilization"]["V100"]
    assert fluid["busy_over_allocated"] == pytest.approx(1.0, rel=1e-6)
    assert fluid["allocated_over_owned"] == pytest.approx(0.5, rel=1e-6)


def test_static_bundles_sit_in_each_teams_slice(tmp_path: Path) -> None:
    # Two teams, one pipeline each at t=0: each team's slice is half of every node type, so
    # half a bundle each (1 core, half the V100's time): 1 item/s, 100 items in 100 s; the
    # V100 held all the time, busy half of it. fitwork: both get 2 items/s (4 cores of pre
    # each on the CPU node, the V100 shared): 50 s.
    lines = [hand_pipeline("a", "a", 0, 100), hand_pipeline("b", "b", 0, 100)]
    got = {}
    for policy in ("static", "fitwork"):
        done = simulate(tmp_path, HAND_FLEET, lines, policy)
        assert done.returncode == 0, done.stderr
        got[policy] = json.loads((tmp_path / f"out-{policy}.json").read_text())
    static = got["static"]
    assert static["avg_completion_s"] == pytest.approx(100.0, rel=1e-6)
    assert static["utilization"]["V100"]["busy_over_allocated"] == pytest.approx(0.5, rel=1e-6)
    assert static["utilization"]["V100"]["allocated_over_owned"] == pytest.approx(1.0, rel=1e-6)
    assert got["fitwork"]["avg_completion_s"] == pytest.approx(50.0, rel=1e-6)


def test_a_pipeline_no_node_type_holds_whole_is_rejected_by_bundles(tmp_path: Path) -> None:
    # Two GPU units, one that runs only on a V100, one only on a K80: no node type has both,
    # so no bundle holds the pipeline; fitwork places each unit on its own node type.
    line = pipeline("p", "t", 0, 10)
    line["units"].append({"name": "score", "rates": {"K80": 2.0}, "cpu": 1, "gpu": 1,
                          "memory": "1GiB"})
    bundled = simulate(tmp_path, SMALL_FLEET, [line], "job-level")
    ours = simulate(tmp_path, SMALL_FLEET, [line], "fitwork")
    assert bundled.returncode == 0 and ours.returncode == 0, bundled.stderr + ours.stderr
    rejected = json.loads((tmp_path / "out-job-level.json").read_text())["rejected"]
    assert list(rejected) == ["p"] and "no node type holds a bundle" in rejected["p"]
    assert json.loads((tmp_path / "out-fitwork.json").read_text())["completed"] == 1


def test_help_lists_every_policy(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "fitwork.cli", "fleet", "simulate", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for policy in POLICIES:
        assert policy in text


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
