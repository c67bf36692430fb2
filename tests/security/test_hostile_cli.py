"""Bad files through the `fitwork` command: one ``error:`` line, a non-zero exit, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitwork.telemetry.record import RunRecord

from .conftest import assert_one_error_line, run_cli

GOOD = [json.dumps({"n": i}).encode() + b"\n" for i in range(10)]


@pytest.mark.parametrize(("name", "blob", "named"), [
    ("utf8.jsonl", b"".join(GOOD) + b'{"n": "\xff"}\n', "utf8.jsonl:11: not valid UTF-8"),
    ("deep.jsonl", b"".join(GOOD) + b"[" * 100_000 + b"]" * 100_000 + b"\n",
     "deep.jsonl:11: JSON nested too deeply"),
    ("nul.jsonl", b"".join(GOOD) + b'{"n": 1}\x00\n', "nul.jsonl:11: invalid JSON"),
    ("cut.jsonl", b"".join(GOOD) + b'{"n": 1', "cut.jsonl:11: invalid JSON"),
    ("bad.csv", b"n\n" + b"".join(b"%d\n" % i for i in range(10)) + b"\xff\n",
     "bad.csv:12: not valid UTF-8"),
], ids=["utf8", "deep", "nul", "cut", "csv"])
def test_a_bad_line_stops_the_run_with_one_line_and_keeps_what_was_written(
        project: Path, name: str, blob: bytes, named: str) -> None:
    (project / name).write_bytes(blob)
    done = run_cli("run", "squares.py:pipeline", "--input", name, "--output", "out.jsonl",
                   "--record", "record.json", "-q", cwd=project)
    assert_one_error_line(done, f"input {named}", "run record in record.json")
    outputs = [json.loads(line) for line in (project / "out.jsonl").read_text().splitlines()]
    assert sorted(o["n"] for o in outputs) == list(range(10))  # nothing already written lost
    record = RunRecord.load(project / "record.json")
    assert record.status == "aborted" and record.outputs == 10


def test_missing_truncated_and_foreign_inputs(project: Path) -> None:
    pytest.importorskip("pyarrow")
    done = run_cli("run", "squares.py:pipeline", "--input", "nope.jsonl", "--output", "o.jsonl",
                   "-q", cwd=project)
    assert_one_error_line(done, "nope.jsonl: no such file or directory")
    (project / "cut.parquet").write_bytes(b"PAR1\x00\x01\x02")
    done = run_cli("run", "squares.py:pipeline", "--input", "cut.parquet", "--output", "o.jsonl",
                   "-q", cwd=project)
    assert_one_error_line(done, "cut.parquet: not a readable Parquet file")


def test_corrupted_or_old_plan_profile_fleet_and_record(project: Path) -> None:
    (project / "plan.json").write_text('{"fitwork_version": "0.2.0", "pipeline": "squ')
    done = run_cli("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "o.jsonl",
                   "--plan", "plan.json", "-q", cwd=project)
    assert_one_error_line(done, "plan plan.json: not a fitwork plan",
                          "make it again with `fitwork plan`")
    (project / "profile.json").write_text('{"fitwork_version": "0.1.0", "pipeline": "squares"}')
    done = run_cli("plan", "squares.py:pipeline", "--profile", "profile.json", cwd=project)
    assert_one_error_line(done, "profile profile.json: written by fitwork 0.1.0",
                          "make it again with `fitwork profile`")
    # a good profile, only to reach the fleet check: its units timed alone will do
    done = run_cli("profile", "squares.py:pipeline", "--input", "in.jsonl", "--samples", "2",
                   "--alone", "--output", "good.json", cwd=project)
    assert done.returncode == 0, done.stderr
    (project / "fleet.yaml").write_bytes(b"name: caf\xe9\n")
    done = run_cli("plan", "squares.py:pipeline", "--profile", "good.json", "--fleet",
                   "fleet.yaml", cwd=project)
    assert_one_error_line(done, "fleet fleet.yaml: not UTF-8 text", "fitwork fleet local")
    (project / "record.json").write_bytes(b"\x89PNG\r\n\x1a\n")
    done = run_cli("report", "record.json", cwd=project)
    assert_one_error_line(done, "run record record.json: not a fitwork run record")


def test_a_path_that_looks_like_markup_is_printed_as_is(project: Path) -> None:
    (project / "a[").mkdir()
    (project / "a[" / "b].json").write_text("{}")  # the path reads a[/b].json
    done = run_cli("report", "a[/b].json", cwd=project)
    assert_one_error_line(done, "run record a[/b].json: not a fitwork run record")
