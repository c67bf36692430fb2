"""One way to run: `fitwork.run(..., output=, journal=, resume=)` as a user's program runs it
(killed mid-run and resumed), and the CLI's file and directory outputs through it (the same
digest for the same outputs; --ordered refused where it cannot hold)."""

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
from fitwork import RunRecord

FITWORK = str(Path(sys.executable).parent / "fitwork")

PROGRAM = textwrap.dedent("""
    import json
    import sys
    import time

    import fitwork
    from fitwork import Pipeline, unit

    @unit(cpu=0.5)
    def slow(row):
        if row["n"] % 50 == 0:
            time.sleep(0.02)  # the run takes seconds, so the kill lands inside it
        return {"n": row["n"], "square": row["n"] * row["n"]}

    pipeline = Pipeline(slow, name="slow")

    if __name__ == "__main__":
        run = fitwork.run(pipeline, "many.jsonl", output="o.jsonl", journal="o.journal",
                          dead_letter="dead.jsonl", resume=sys.argv[1:] == ["resume"])
        record = run.record
        print(json.dumps({"outputs": record.outputs, "digest": record.output_digest}))
""")

PIPE = textwrap.dedent("""
    from fitwork import Pipeline, unit

    @unit
    def square(row):
        return {"n": row["n"], "square": row["n"] * row["n"], "half": row["n"] / 2}

    pipeline = Pipeline(square, name="pipe")
""")


def _fitwork(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "PYTHONPATH")}
    return subprocess.run([FITWORK, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=environment)


def test_a_journaled_library_run_killed_midway_resumes_losing_and_doubling_nothing(
        tmp_path: Path) -> None:
    count = 20_000
    (tmp_path / "program.py").write_text(PROGRAM)
    (tmp_path / "many.jsonl").write_text("".join(json.dumps({"n": i}) + "\n"
                                                 for i in range(count)))
    journal = tmp_path / "o.journal" / "journal.jsonl"
    started = subprocess.Popen([sys.executable, "program.py"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while started.poll() is None and time.monotonic() < deadline and (
            not journal.exists() or len(journal.read_bytes().splitlines()) < 3):
        time.sleep(0.05)
    assert started.poll() is None, started.communicate()[1][-3000:]
    os.kill(started.pid, signal.SIGKILL)
    started.communicate(timeout=60)
    before = len((tmp_path / "o.jsonl").read_text().splitlines())
    assert 0 < before < count  # killed mid-run
    resumed = subprocess.run([sys.executable, "program.py", "resume"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    said = json.loads(resumed.stdout.splitlines()[-1])
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    seen = Counter(row["n"] for row in rows)
    assert sorted(seen) == list(range(count)) and set(seen.values()) == {1}
    assert all(row["square"] == row["n"] ** 2 for row in rows)
    assert 0 < said["outputs"] < count  # the record counts what the resumed part ran
    whole = fitwork.OutputDigest()  # and its digest is the whole output's: a clean run's
    for n in range(count):
        whole.add({"n": n, "square": n * n})
    assert said["digest"] == whole.hexdigest()
    assert not journal.parent.exists()  # finished: nothing left to resume
    again = subprocess.run([sys.executable, "program.py", "resume"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "no journal to resume" in again.stderr


def _digest_line(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("output digest ")]
    assert len(lines) == 1, stdout
    return lines[0].split()[2]


def test_a_sharded_run_records_and_prints_the_digest_a_file_run_of_the_same_rows_does(
        tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(PIPE)
    rows = [json.dumps({"n": n}) + "\n" for n in range(200)]
    (tmp_path / "in.jsonl").write_text("".join(rows))
    (tmp_path / "in").mkdir()
    for k in range(4):
        (tmp_path / "in" / f"{k}.jsonl").write_text("".join(rows[k::4]))
    filed = _fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "o.jsonl",
                     "-q", "--record", "file.json", cwd=tmp_path)
    assert filed.returncode == 0, filed.stderr
    sharded = _fitwork("run", "pipe:pipeline", "--input", "in/", "--output", "out/", "-q",
                       "--record", "sharded.json", "-w", "square=2", cwd=tmp_path)
    assert sharded.returncode == 0, sharded.stderr
    file_record = RunRecord.model_validate_json((tmp_path / "file.json").read_text())
    shard_record = RunRecord.model_validate_json((tmp_path / "sharded.json").read_text())
    assert file_record.output_digest is not None and file_record.output_digest.startswith("200:")
    assert shard_record.output_digest == file_record.output_digest
    assert _digest_line(sharded.stdout) == _digest_line(filed.stdout) == \
        file_record.output_digest
    # one row different: a different digest
    (tmp_path / "in" / "0.jsonl").write_text("".join([json.dumps({"n": 1000}) + "\n",
                                                      *rows[4::4]]))
    other = _fitwork("run", "pipe:pipeline", "--input", "in/", "--output", "out/", "-q",
                     "--mode", "overwrite", cwd=tmp_path)
    assert other.returncode == 0, other.stderr
    assert _digest_line(other.stdout) != file_record.output_digest


def test_ordered_with_a_directory_output_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(PIPE)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0.jsonl").write_text(json.dumps({"n": 1}) + "\n")
    refused = _fitwork("run", "pipe:pipeline", "--input", "in/", "--output", "out/",
                       "--ordered", "-q", cwd=tmp_path)
    assert refused.returncode == 2
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, refused.stderr
    assert "--ordered" in lines[0] and "give a file --output" in lines[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.journal").exists()
    kept = _fitwork("run", "pipe:pipeline", "--input", "in/0.jsonl", "--output", "o.jsonl",
                    "--ordered", "-q", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr


def test_run_takes_a_placement_or_a_plan_and_refuses_anything_else() -> None:
    @fitwork.unit
    def double(x: int) -> int:
        return 2 * x

    pipeline = fitwork.Pipeline(double, name="p")

    class LooksLikeAPlan:
        fused = False

        def placement(self) -> fitwork.Placement:
            return fitwork.Placement.declared(pipeline)

    with pytest.raises(TypeError, match=r"fitwork\.Placement or a fitwork\.Plan, not "
                                        r"LooksLikeAPlan"):
        fitwork.run(pipeline, [1, 2], placement=LooksLikeAPlan())  # type: ignore[arg-type]
    with fitwork.run(pipeline, [1, 2], engine="sim",
                     placement=fitwork.Placement.declared(pipeline)) as result:
        assert sorted(result) == [2, 4]


def test_a_run_into_an_output_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    @fitwork.unit
    def same(x: int) -> int:
        return x

    pipeline = fitwork.Pipeline(same, name="p")
    with pytest.raises(fitwork.UnitDefinitionError, match=r"journal= needs an input"):
        fitwork.run(pipeline, [1, 2], output=tmp_path / "o.jsonl", journal=tmp_path / "j")
    with pytest.raises(fitwork.UnitDefinitionError, match=r"ordered=True with output"):
        fitwork.run(pipeline, [1, 2], output=f"{tmp_path}/parts/", ordered=True)
    with pytest.raises(fitwork.UnitDefinitionError, match=r"give its journal="):
        fitwork.run(pipeline, [1, 2], output=tmp_path / "o.jsonl", resume=True)
    run = fitwork.run(pipeline, [1, 2, 3], engine="sim", output=tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()  # starts when first used
    assert run.record.output_digest is not None and run.record.output_digest.startswith("3:")
    assert sorted(map(int, (tmp_path / "o.jsonl").read_text().split())) == [1, 2, 3]


def test_output_is_the_one_way_to_write_outputs_and_takes_a_stream(tmp_path: Path) -> None:
    import io

    @fitwork.unit
    def double(row: dict) -> dict:
        return {"n": row["n"], "double": 2 * row["n"]}

    pipeline = fitwork.Pipeline(double, name="double")
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(50)))
    with pytest.raises(fitwork.UnitDefinitionError, match="sink= is output= now"):
        fitwork.run(pipeline, tmp_path / "in.jsonl", sink=fitwork.Sink.files(tmp_path / "o"))
    stream = io.BytesIO()
    record = fitwork.run(pipeline, tmp_path / "in.jsonl", output=stream).record
    rows = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert sorted(r["double"] for r in rows) == [2 * n for n in range(50)]
    digest = fitwork.OutputDigest()
    for row in rows:
        digest.add(row)
    assert record.output_digest == digest.hexdigest() and not stream.closed
    with pytest.raises(fitwork.UnitDefinitionError, match=r"a stream \(stdout\) has no place"):
        fitwork.run(pipeline, tmp_path / "in.jsonl", output=io.BytesIO(),
                    journal=tmp_path / "j")
