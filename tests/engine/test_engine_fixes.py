"""Defects seen by users, each pinned: file-path pipelines on Ray, replacements that get no
traffic, start-up failures buried in stack dumps, and calls into Ray that never return."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

import fitwork
from fitwork import EngineError, Pipeline
from fitwork.hardware.ray_cluster import within
from tests.engine import units as u

ROOT = Path(__file__).resolve().parents[2]

PIPELINES = textwrap.dedent("""
    import time
    from fitwork import Pipeline, unit

    @unit
    def parse(row):
        return int(row["n"])

    @unit
    def square(n):
        time.sleep(0.001)
        return {"n": n, "square": n * n}

    two_units = Pipeline(parse, square, name="two_units")

    @unit
    class Broken:
        def __init__(self):
            raise RuntimeError("model weights [v2] not found")

        def __call__(self, item):
            return item

    broken = Pipeline(parse, Broken, name="broken")
""")


def fitwork_cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fitwork.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, **env})  # the session cluster's token


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "my_pipelines.py").write_text(PIPELINES)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(300)))
    return tmp_path


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_pipeline_given_as_a_file_path_runs(engine: str, project: Path,
                                              request: pytest.FixtureRequest) -> None:
    extra = []
    if engine == "ray":
        extra = ["--ray-address", request.getfixturevalue("ray_cluster").address]
    done = fitwork_cli("run", "my_pipelines.py:two_units", "--engine", engine, "--input",
                       "in.jsonl", "--output", "out.jsonl", "-q", *extra, cwd=project)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (project / "out.jsonl").read_text().splitlines()]
    assert Counter(r["n"] for r in rows) == Counter(range(300))
    assert all(r["square"] == r["n"] ** 2 for r in rows)


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_unit_that_cannot_start_gives_one_line(engine: str, project: Path,
                                                 request: pytest.FixtureRequest) -> None:
    extra = []
    if engine == "ray":
        extra = ["--ray-address", request.getfixturevalue("ray_cluster").address]
    done = fitwork_cli("run", "my_pipelines.py:broken", "--engine", engine, "--input",
                       "in.jsonl", "--output", "out.jsonl", "-q", *extra, cwd=project)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "unit 'Broken' could not start" in errors[0]
    assert "model weights [v2] not found" in errors[0]  # square brackets survive
    assert "Traceback" not in done.stderr


def test_a_replacement_replica_of_a_later_stage_gets_traffic(ray_cluster: object) -> None:
    pipeline = Pipeline(u.double, u.slow_square)
    seen: dict[str, int | None] = {"replaced_at": None}
    fed = []

    def source():  # runs on until the replacement has had 1,500 items' worth of time
        for x in range(100_000):
            if seen["replaced_at"] is not None and x > seen["replaced_at"] + 1500:
                return
            fed.append(x)
            yield x

    outputs: list[int] = []
    killed = None
    with fitwork.run(pipeline, source(), engine="ray",
                     workers={"slow_square": 2}) as result:
        for output in result:
            outputs.append(output)
            if len(outputs) == 30:
                first = result.worker_pids("slow_square")
                killed = first[0]
                os.kill(killed, signal.SIGKILL)
            elif (killed is not None and seen["replaced_at"] is None
                  and len(outputs) % 50 == 0
                  and set(result.worker_pids("slow_square")) - set(first)):
                seen["replaced_at"] = len(fed)
    assert Counter(outputs) == Counter((2 * x) ** 2 for x in fed)
    record = result.record
    squares = [w for w in record.workers if w.unit == "slow_square"]
    replacement = max(squares, key=lambda w: w.started_s)
    assert killed is not None and replacement.pid != killed
    assert replacement.started_s > 0 and replacement.items_in > 0, squares


def test_a_call_that_does_not_answer_fails_in_one_line_naming_it() -> None:
    start = time.monotonic()
    with pytest.raises(EngineError, match=r"Ray did not answer ray\.nodes\(\) within 0\.2 s"):
        within(0.2, "ray.nodes()", lambda: time.sleep(5))
    assert time.monotonic() - start < 2
    assert within(1, "a quick call", lambda: 42) == 42
