"""Many pipelines on one host, as a user runs them: a jobs file planned and run by the CLI, and
a `__main__` script running its own pipelines through the API, with a row that kills its
worker in one pipeline; every other pipeline's output exact, the bad one's dead letter
written, each pipeline's share of the cores near the plan's."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fitwork.jobs.plan import FleetPlan
from fitwork.jobs.record import FleetRecord

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
ENV = {"SCORING_ROUNDS": "3000", "TOKENS_WORK": "6000", "LOOKUP_WAIT_S": "0.01"}
SHARE_REACH = 0.10
"""How far, relative, a pipeline's realized share of the cores the three use may sit from its
planned share in the stretch where all three run (issue 36's ±10%); in a stretch shorter than
`SETTLE_S` (a quiet host finishes these inputs fast), the controller's first second of
readings weighs too much, and the reach is 0.10 of the cores used, absolute."""
SETTLE_S = 4.0
"""A stretch this long holds four of the share controller's 1 s windows."""


def _copy(tmp: Path, count: int) -> Path:
    """The examples' jobs file, pipelines and inputs (``count`` items) in ``tmp``."""
    for name in ("scoring.py", "tokens.py", "lookup.py", "make_inputs.py", "jobs.yaml"):
        shutil.copy(EXAMPLES / name, tmp / name)
    subprocess.run([sys.executable, str(tmp / "make_inputs.py"), str(count)], check=True,
                   cwd=tmp)
    return tmp / "jobs.yaml"


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"expected_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _expected(tmp: Path, name: str) -> Counter[str]:
    """What the serial reference gives for ``name``'s input."""
    os.environ.update(ENV)
    module = _module(tmp / f"{name}.py")
    items = _lines(tmp / f"{name}.jsonl")
    return Counter(json.dumps(o, sort_keys=True) for o in module.pipeline.serial(items))


def _check_tokens(tmp: Path, got: Counter[str]) -> None:
    """tokens' outputs: every document's sentences exactly once, but the one whose sentence
    kills its worker: that source item is the poison, so its sentences may be missing (none
    of them twice, and the killer never)."""
    os.environ.update(ENV)
    module = _module(tmp / "tokens.py")
    poisoned: Counter[str] = Counter()
    clean: Counter[str] = Counter()
    for item in _lines(tmp / "tokens.jsonl"):
        parts = list(module.sentences.fn(item))
        killer = any(p["text"] == "kill" for p in parts)
        for part in parts:
            if part["text"] != "kill":
                out = json.dumps(module.count.fn(part), sort_keys=True)
                (poisoned if killer else clean)[out] += 1
    kept = got - clean
    assert got - kept == clean, "a good document's sentence lost or doubled"
    assert all(kept[k] == 1 and k in poisoned for k in kept), kept


def _got(path: Path) -> Counter[str]:
    return Counter(json.dumps(o, sort_keys=True) for o in _lines(path))


def _fitwork(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fitwork", *args], cwd=cwd, text=True,
                          capture_output=True, env={**os.environ, **ENV}, timeout=600)


def test_a_jobs_file_planned_and_run_by_the_cli(tmp_path: Path) -> None:
    jobs = _copy(tmp_path, 400)
    planned = _fitwork("plan", "--jobs", str(jobs), "-o", "fleet.json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    plan = FleetPlan.load(tmp_path / "fleet.json")
    assert [j.status for j in plan.jobs] == ["admitted"] * 3
    scoring, tokens, _ = plan.jobs
    # weights 2:1:1 under the fair objective: scoring's normalised rate is twice the others'
    assert scoring.normalised == pytest.approx(2 * tokens.normalised, rel=0.05)
    assert "fleet plan, fair" in planned.stdout and "cost per hour by team" in planned.stdout

    ran = _fitwork("run", "--jobs", str(jobs), "--plan", "fleet.json", "--fleet-record",
                   "fleet-record.json", cwd=tmp_path)
    assert ran.returncode == 1, ran.stdout + ran.stderr  # tokens lost its killing row
    out = tmp_path / "out"
    assert _got(out / "scoring.jsonl") == _expected(tmp_path, "scoring")
    assert _got(out / "lookup.jsonl") == _expected(tmp_path, "lookup")
    _check_tokens(tmp_path, _got(out / "tokens.jsonl"))
    dead = _lines(out / "tokens.jsonl.dead-letters.jsonl")
    assert len(dead) == 1 and "SIGKILL" in json.dumps(dead[0])

    record = FleetRecord.load(tmp_path / "fleet-record.json")
    status = {o.name: o.status for o in record.jobs}
    assert status == {"scoring": "succeeded", "tokens": "failed", "lookup": "succeeded"}
    for o in record.jobs:
        assert Path(o.record or "").exists(), o.name  # each keeps its own run record
    assert len(record.decisions) >= 3  # the arrival, then each departure but the last
    # each runs at least the replicas its own plan alone would, the controller holding it
    # to its share while the cores are contended (a share left unused goes to the others)
    for job in plan.jobs:
        alone: Counter[str] = Counter()
        for group in job.plan.fitted.result.replicas:
            alone[group.unit] += group.replicas
        ran_with = record.decisions[0].replicas[job.name]
        assert all(ran_with.get(u, 0) >= n for u, n in alone.items()), (job.name, ran_with)
    assert "finished" in record.decisions[1].reason
    together = [e for e in record.epochs if len(e.running) == 3]
    assert together, record.epochs
    main = max(together, key=lambda e: e.end_s - e.start_s)
    assert record.share_control is not None and record.share_control.lever in (
        "autogroup", "duty"), record.share_control
    settled = main.end_s - main.start_s >= SETTLE_S
    for name, planned_share in main.planned_share.items():
        # against the controller's target: the planned share renormalised over the
        # pipelines that were CPU-hungry; where that is the plan's (all hungry), the plan's
        target = main.target_share[name]
        if not settled:
            assert abs(main.realized_share[name] - target) <= SHARE_REACH, (name, main)
            continue
        assert abs(main.target_ratio(name) - 1) <= SHARE_REACH, (name, main)
        if abs(target / planned_share - 1) <= SHARE_REACH / 2:
            assert abs(main.share_ratio(name) - 1) <= SHARE_REACH, (name, main)
    assert all(e.realized_utilization <= 1.0 + 1e-6 for e in record.epochs)


SCRIPT = '''
"""A user's script: its own pipeline defined here, run beside two others through the API."""
import sys
import time

import fitwork
from fitwork import Pipeline, unit


@unit
def shout(item):
    return {"id": item["id"], "text": str(item["text"]).upper()}


@unit
def measure(item):
    return {"id": item["id"], "length": len(item["text"])}


pipeline = Pipeline(shout, measure, name="mine")

if __name__ == "__main__":
    record = fitwork.run_many([
        {"name": "mine", "pipeline": f"{__file__}:pipeline", "input": "scoring.jsonl",
         "output": "out/mine.jsonl", "weight": 2, "team": "me"},
        {"name": "scoring", "pipeline": "scoring.py:pipeline", "input": "scoring.jsonl",
         "output": "out/scoring.jsonl", "team": "search", "start_after": 1.0},
        {"name": "bad", "pipeline": "scoring.py:pipeline", "input": "missing.jsonl",
         "output": "out/bad.jsonl", "team": "search"},
    ], record="fleet-record.json")
    print("exit", record.exit_code)
'''


def test_a_main_script_runs_its_pipelines_through_the_api_unplanned(tmp_path: Path) -> None:
    _copy(tmp_path, 200)
    (tmp_path / "mine.py").write_text(SCRIPT)
    ran = subprocess.run([sys.executable, "mine.py"], cwd=tmp_path, text=True,
                         capture_output=True, env={**os.environ, **ENV}, timeout=600)
    assert ran.returncode == 0, ran.stderr
    assert "exit 1" in ran.stdout  # the job with a missing input failed, alone
    items = _lines(tmp_path / "scoring.jsonl")
    mine = Counter(json.dumps({"id": i["id"], "length": len(str(i["text"]).upper())},
                              sort_keys=True) for i in items)
    assert _got(tmp_path / "out" / "mine.jsonl") == mine
    assert _got(tmp_path / "out" / "scoring.jsonl") == _expected(tmp_path, "scoring")
    record = FleetRecord.load(tmp_path / "fleet-record.json")
    bad = next(o for o in record.jobs if o.name == "bad")
    assert bad.status == "failed" and "missing.jsonl" in (bad.reason or "")
    started = {o.name: o.started_s for o in record.jobs}
    assert started["scoring"] >= 1.0 > started["mine"]  # start_after held


def test_a_bad_jobs_file_is_one_line_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "jobs.yaml").write_text("jobs:\n  - name: Bad_Name\n    pipeline: x\n")
    ran = _fitwork("plan", "--jobs", "jobs.yaml", cwd=tmp_path)
    assert ran.returncode != 0
    line = ran.stderr.strip().splitlines()[-1]
    assert "jobs.yaml" in line and "jobs[0].name" in line and "jobs[0].input" in line


def test_an_interrupted_fleet_run_resumes_each_pipeline_where_it_stopped(tmp_path: Path
                                                                         ) -> None:
    import time

    jobs = _copy(tmp_path, 1000)
    env = {**os.environ, **ENV}
    run = subprocess.Popen([sys.executable, "-m", "fitwork", "run", "--jobs", str(jobs)],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    scoring = tmp_path / "out" / "scoring.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        if scoring.exists() and len(scoring.read_text().splitlines()) >= 100:
            break
        time.sleep(0.2)
    assert run.poll() is None, "the run ended before it could be interrupted"
    run.terminate()
    _, err = run.communicate(timeout=120)
    assert run.returncode == 143, err
    assert "--resume" in err.strip().splitlines()[-1]
    assert len(_lines(scoring)) < 1000  # it did stop part way

    resumed = _fitwork("run", "--jobs", str(jobs), "--resume", cwd=tmp_path)
    assert resumed.returncode == 1, resumed.stderr  # tokens' killing row, as before
    out = tmp_path / "out"
    logs = {p.name: p.read_text()[-1500:] for p in out.glob("*.log")}
    assert _got(out / "scoring.jsonl") == _expected(tmp_path, "scoring"), (err, logs)
    assert (out / "lookup.jsonl").exists(), (err, resumed.stderr, logs)
    assert _got(out / "lookup.jsonl") == _expected(tmp_path, "lookup")
    _check_tokens(tmp_path, _got(out / "tokens.jsonl"))


def test_a_finished_fleet_resumed_keeps_each_pipelines_exit_status(tmp_path: Path) -> None:
    jobs = _copy(tmp_path, 200)
    first = _fitwork("run", "--jobs", str(jobs), cwd=tmp_path)
    assert first.returncode == 1, first.stderr  # tokens' killing row
    again = _fitwork("run", "--jobs", str(jobs), "--resume", "--fleet-record", "again.json",
                     cwd=tmp_path)
    # nothing runs again, and the pipeline whose row failed still fails the fleet run
    assert again.returncode == 1, again.stderr
    assert again.stderr.count("already complete") == 3, again.stderr
    outcomes = {o.name: o for o in FleetRecord.load(tmp_path / "again.json").jobs}
    assert outcomes["tokens"].status == "failed" and outcomes["tokens"].exit_code == 1
    assert "1 item(s) failed in its earlier run" in (outcomes["tokens"].reason or "")
    assert "tokens.jsonl.dead-letters.jsonl" in (outcomes["tokens"].reason or "")
    assert {outcomes[n].status for n in ("scoring", "lookup")} == {"succeeded"}
    assert all(o.started_s is None for o in outcomes.values())  # none was started


def test_a_job_the_fleet_cannot_hold_beside_another_is_queued_then_runs(tmp_path: Path
                                                                        ) -> None:
    _copy(tmp_path, 300)
    profiled = _fitwork("profile", "scoring.py:pipeline", "--input", "scoring.jsonl", "-o",
                        "scoring.profile.json", cwd=tmp_path)
    assert profiled.returncode == 0, profiled.stderr
    entry = ("  - name: {name}\n    pipeline: scoring.py:pipeline\n    input: scoring.jsonl\n"
             "    output: out/{name}.jsonl\n    profile: scoring.profile.json\n{extra}")
    (tmp_path / "probe.yaml").write_text("jobs:\n" + entry.format(name="probe", extra=""))
    probe = _fitwork("plan", "--jobs", "probe.yaml", "-o", "probe.json", cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    alone = FleetPlan.load(tmp_path / "probe.json").jobs[0].alone_rate
    need = f"    min_rate: {0.7 * alone:.3f}\n"  # two such cannot share the fleet
    (tmp_path / "jobs.yaml").write_text(
        "jobs:\n" + entry.format(name="first", extra=need)
        + entry.format(name="second", extra=need))
    planned = _fitwork("plan", "--jobs", "jobs.yaml", "-o", "fleet.json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    first, second = FleetPlan.load(tmp_path / "fleet.json").jobs
    assert (first.status, second.status) == ("admitted", "queued"), planned.stdout
    assert second.reason and "second [default, weight 1]: queued" in planned.stdout

    ran = _fitwork("run", "--jobs", "jobs.yaml", "--plan", "fleet.json", "--fleet-record",
                   "record.json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    record = FleetRecord.load(tmp_path / "record.json")
    ends = {o.name: (o.started_s or 0.0, o.ended_s or 0.0) for o in record.jobs}
    assert ends["second"][0] >= ends["first"][1] - 0.5  # it started once the first was done
    for name in ("first", "second"):
        assert _got(tmp_path / "out" / f"{name}.jsonl") == _expected(tmp_path, "scoring")
