"""Journals: a run whose driver is killed with SIGKILL resumes with every output once."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fitwork.engine.local.wire import shm_dir
from fitwork.engine.parts import read_parts
from fitwork.errors import InputError
from fitwork.io.journal import (
    JOURNAL_FILE,
    Done,
    Journal,
    JournalError,
    Renumbering,
    identity,
    load,
)

PIPELINE = """
import time
from fitwork import Pipeline, unit

@unit(cpu=0.5)
def parse(row):
    return int(row["n"])

@unit(kind="filter", cpu=0.25)
def keep(n):
    return n % 5 != 0

@unit(cpu=0.5)
def spread(n):
    if n % 125 == 1:
        time.sleep(0.02)  # the run takes a few seconds, so kills land inside it
    yield {"n": n, "part": 0}
    if n % 3 == 0:
        yield {"n": n, "part": 1}

pipeline = Pipeline(parse, keep, spread, name="spread")
"""


def expected(count: int) -> Counter[tuple[int, int]]:
    return Counter((n, part) for n in range(count) if n % 5 for part in
                   ((0, 1) if n % 3 == 0 else (0,)))


def rows(path: Path) -> Counter[tuple[int, int]]:
    if path.is_dir():  # a sharded run's parts
        return Counter((r["n"], r["part"]) for r in read_parts(path))
    if path.suffix == ".parquet":
        import pyarrow.parquet

        table = pyarrow.parquet.read_table(path).to_pylist()
        return Counter((r["n"], r["part"]) for r in table)
    return Counter((r["n"], r["part"]) for r in map(json.loads, path.read_text().splitlines()))


def checkpoints(journal: Path) -> int:
    """Checkpoint lines in a journal so far (none if there is no journal)."""
    return max(0, len(journal.read_bytes().split(b"\n")) - 2) if journal.exists() else 0


def progress(journal: Path, output: Path) -> tuple[int, int]:
    """How far a run has gone: its journal's checkpoints, and the bytes of its parts (a
    sharded output's, written as outputs arrive; 0 for a file)."""
    parts = sum(p.stat().st_size for p in output.glob("part-*")) if output.is_dir() else 0
    return checkpoints(journal), parts


def start(project: Path, *extra: str, output: str = "out.jsonl") -> subprocess.Popen[str]:
    source = "in/" if output.endswith("/") else "in.jsonl"  # a sharded run reads files
    return subprocess.Popen(
        [sys.executable, "-m", "fitwork.cli", "run", "job.py:pipeline", "--input", source,
         "--output", output, "-q", "--workers", "spread=2", *extra],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "job.py").write_text(PIPELINE)
    before = {p.name for p in shm_dir().glob("fitwork-*")}
    yield tmp_path
    # a driver killed with SIGKILL cannot sweep the frames it spilled (private files):
    # the test removes what its own killed runs left
    for path in shm_dir().glob("fitwork-*"):
        if path.name not in before and not psutil.pid_exists(int(path.name.split("-")[2])):
            path.unlink(missing_ok=True)


def write_input(project: Path, count: int) -> None:
    (project / "in.jsonl").write_text("".join(f'{{"n": {i}}}\n' for i in range(count)))


@pytest.mark.parametrize(("which", "output"), [("local", "out.jsonl"), ("ray", "out.jsonl"),
                                               ("local", "out.parquet"), ("local", "out/")])
def test_a_driver_killed_at_random_points_resumes_with_every_output_once(
        project: Path, which: str, output: str, request: pytest.FixtureRequest) -> None:
    if output.endswith((".parquet", "/")):  # two kills must land; three tries give room
        count, kills = 40_000 if output.endswith(".parquet") else 100_000, 3
    else:
        count, kills = (100_000, 5) if which == "local" else (40_000, 3)
    pace = (0.0, 0.8)  # seconds from a try's first checkpoint to its kill
    write_input(project, count)
    fed = count
    if output.endswith("/"):  # sharded: 50 files, a shard each, read by the replicas
        fed = 50
        (project / "in").mkdir()
        lines = (project / "in.jsonl").read_text().splitlines(keepends=True)
        for k in range(fed):
            (project / "in" / f"{k:02d}.jsonl").write_text("".join(lines[k::fed]))
    extra = ["--engine", which]
    if which == "ray":
        extra += ["--ray-address", request.getfixturevalue("ray_cluster").address]
    rng = random.Random(7)
    journal = project / f"{output.rstrip('/')}.journal" / JOURNAL_FILE
    for _ in range(5):  # a busy host may finish the run before two kills land: start over
        landed, ended = 0, False
        for _ in range(kills):
            before = progress(journal, project / output)
            resume = ["--resume"] if journal.exists() else []  # killed before it began: anew
            run = start(project, *extra, *resume, output=output)
            # kill at a random moment after this try has made progress: journaled some, or
            # (a sharded output, whose resumed run may end every shard left in one wave and
            # so journal nothing before its end) written more to its parts
            deadline = time.monotonic() + 120
            while run.poll() is None and time.monotonic() < deadline and not any(
                    now > was for now, was in zip(progress(journal, project / output), before,
                                                  strict=True)):
                time.sleep(0.05)
            # a resumed run has less left to do: its kill comes sooner, so that it lands
            time.sleep(rng.uniform(*pace) if not landed else rng.uniform(0.0, pace[1] / 3))
            if run.poll() is None:
                os.kill(run.pid, signal.SIGKILL)
                landed += 1
            _, err = run.communicate(timeout=60)
            if run.returncode == 0:
                break
            assert run.returncode == -signal.SIGKILL, err
            if not journal.exists() and (project / output).exists():
                # killed after the output was whole and its journal gone: it had ended
                ended = True
                break
        if landed >= 2:
            break
        shutil.rmtree(journal.parent, ignore_errors=True)
        if output.endswith("/"):
            shutil.rmtree(project / output, ignore_errors=True)
        else:
            (project / output).unlink(missing_ok=True)
        shutil.rmtree(project / f"{output}.parts", ignore_errors=True)
    assert landed >= 2, "the kills should land while the run goes on"
    if journal.exists():
        done = load(journal.parent).done.count
        assert done > 0, "checkpoints were taken"
        final = start(project, *extra, "--resume", "--record", "final.json", output=output)
        _, err = final.communicate(timeout=240)
        assert final.returncode == 0, err
        # the last run fed exactly what the journal had not seen done: none at all when the
        # kill landed after every item was done but before the output was made whole
        assert json.loads((project / "final.json").read_text())["items_in"] == fed - done
    got = rows(project / output)
    assert got == expected(count)  # every output exactly once
    assert not journal.parent.exists()  # a finished run leaves none
    if ended:  # killed in its last step (journal gone, a Parquet output's parts not yet):
        again = start(project, *extra, "--resume", output=output)  # the next run cleans
        _, err = again.communicate(timeout=60)  # them, even one refused (nothing to resume)
        assert again.returncode != 0 and "no journal to resume" in err
        assert rows(project / output) == expected(count)
    assert not (project / f"{output}.parts").exists()


@pytest.mark.parametrize("left", [None, b"", b'{"fitwork_version": "0'])
def test_a_run_stopped_before_its_journal_began_is_resumed_from_the_start(
        project: Path, left: bytes | None) -> None:
    """A run stopped between making its journal's directory and writing the header (a
    fleet run stopped while one of its pipelines was starting) left a journal with nothing
    to continue: ``--resume`` runs it from the first item instead of refusing."""
    write_input(project, 300)
    journal = project / "out.jsonl.journal"
    journal.mkdir()
    if left is not None:
        (journal / "journal.jsonl").write_bytes(left)
    resumed = start(project, "--resume")
    _, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    assert rows(project / "out.jsonl") == expected(300)
    assert not journal.exists()


def test_the_next_run_removes_the_parts_a_run_stopped_in_its_last_step_left(
        project: Path) -> None:
    write_input(project, 300)
    finished = start(project, output="out.parquet")
    _, err = finished.communicate(timeout=120)
    assert finished.returncode == 0, err
    parts, output = project / "out.parquet.parts", project / "out.parquet"

    def stale() -> None:  # what a kill between the journal's removal and the parts' leaves
        parts.mkdir(exist_ok=True)
        (parts / "part-000000.parquet").write_bytes(output.read_bytes())
        os.utime(parts / "part-000000.parquet", (1e9, 1e9))

    # the output joined them, so they are stale: the next run removes them, whether it
    # resumes (and finds nothing to resume), or runs anew without a journal or with one
    stale()
    refused = start(project, "--resume", output="out.parquet")
    _, err = refused.communicate(timeout=60)
    assert refused.returncode != 0 and "no journal to resume" in err and not parts.exists()
    for journal in ("--no-journal", "--journal=j"):
        stale()
        again = start(project, journal, "--mode", "overwrite", output="out.parquet")
        _, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        assert not parts.exists() and rows(output) == expected(300)
    stale()
    import fitwork
    from fitwork.workload.loader import load_pipeline

    pipeline = load_pipeline(f"{project / 'job.py'}:pipeline")
    with fitwork.run(pipeline, ({"n": i} for i in range(300)), output=output) as run:
        assert sum(1 for _ in run) == len(list(expected(300).elements()))
    assert not parts.exists() and rows(output) == expected(300)
    # parts newer than the output, or beside a journal, may be an interrupted run's: kept
    for newer, journaled in ((True, False), (False, True)):
        stale()
        if newer:
            os.utime(output, (1e9 - 1, 1e9 - 1))
        if journaled:
            (project / "out.parquet.journal").mkdir()
        fresh = start(project, "--no-journal", "--mode", "overwrite", output="out.parquet")
        _, err = fresh.communicate(timeout=120)
        assert fresh.returncode == 0, err
        assert (parts / "part-000000.parquet").is_file()
        shutil.rmtree(project / "out.parquet.journal", ignore_errors=True)


def test_a_journal_from_another_input_or_a_fresh_run_over_it_is_refused(project: Path) -> None:
    write_input(project, 60_000)
    run = start(project)
    journal = project / "out.jsonl.journal" / JOURNAL_FILE
    deadline = time.monotonic() + 60  # a journal with no checkpoint is taken over, not refused
    while run.poll() is None and checkpoints(journal) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.poll() is None, "the run should still be going"
    os.kill(run.pid, signal.SIGKILL)
    run.communicate(timeout=60)
    again = start(project)
    _, err = again.communicate(timeout=60)
    assert again.returncode != 0 and "pass --resume to continue" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    # what the run had finished is identified by its bytes: a change there is refused
    (project / "in.jsonl").write_text("".join(f'{{"n": {i} }}\n' for i in range(60_000)))
    other = start(project, "--resume")
    _, err = other.communicate(timeout=60)
    assert other.returncode != 0 and "input in.jsonl changed within its first" in err
    assert len(err.strip().splitlines()) == 1


def test_done_items_are_skipped_and_resumed_indices_map_back() -> None:
    done = Done()
    for start_, count in [(5, 3), (0, 2), (8, 2), (20, 1)]:
        done.add(start_, count)
    assert done.intervals == [(0, 2), (5, 10), (20, 21)] and done.count == 8
    remaining = list(done.remaining(range(25)))
    assert remaining == [2, 3, 4, *range(10, 20), 21, 22, 23, 24]
    renumber = Renumbering(done)
    # resumed index i is remaining[i]; a span crossing done items splits
    for start_ in range(len(remaining)):
        for count in range(1, len(remaining) - start_ + 1):
            spans = renumber.original(start_, count)
            assert [i for s, n in spans for i in range(s, s + n)] == \
                remaining[start_:start_ + count]
    assert renumber.original(30, 2) == [(38, 2)]  # past the input seen so far


def test_a_torn_last_line_is_ignored_and_a_corrupt_one_is_named(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"n": 1}\n')
    header = identity("p", source, tmp_path / "out.jsonl", units=["a"])
    where = tmp_path / "j"
    journal = Journal.start(where, header)
    journal.checkpoint([(0, 4)], 100, 4)
    journal.checkpoint([(4, 2)], 150, 6)
    journal.close()
    path = where / JOURNAL_FILE
    with path.open("ab") as held:
        held.write(b'{"spans": [[6, ')  # the crash came mid-line
    state = load(where)
    assert state.done.intervals == [(0, 6)] and (state.output_at, state.outputs) == (150, 6)
    with pytest.raises(JournalError, match="an interrupted run into this output"):
        Journal.start(where, header)
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"not json"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(JournalError, match=r"line 2 is corrupt; delete .* and run again"):
        load(where)
    with pytest.raises(JournalError, match="no journal to resume"):
        load(tmp_path / "nowhere")


def test_a_parquet_output_resumes_from_its_committed_parts(tmp_path: Path) -> None:
    pyarrow_parquet = pytest.importorskip("pyarrow.parquet")
    from fitwork.io.writers import open_writer

    out = tmp_path / "out.parquet"
    first = open_writer(out, journaled=True)
    for n in range(5):
        first.write({"n": n})
    at, count = first.sync(), first.count  # a checkpoint: 5 rows in 1 part
    for n in range(5, 8):
        first.write({"n": n})
    first.sync()  # committed after the journal's last line: a resumed run drops it
    assert (at, count) == (1, 5) and first.parts == 2
    # the driver dies here: no close, no join
    resumed = open_writer(out, resume_at=(at, 5), journaled=True)
    assert sorted(p.name for p in (tmp_path / "out.parquet.parts").iterdir()) == [
        "part-000000.parquet"]
    for n in range(5, 9):
        resumed.write({"n": n})
    resumed.close()
    assert [r["n"] for r in pyarrow_parquet.read_table(out).to_pylist()] == list(range(9))
    resumed.cleanup()
    assert not (tmp_path / "out.parquet.parts").exists()
    with pytest.raises(InputError, match=r"part-000000\.parquet of the interrupted run is missing"):
        open_writer(out, resume_at=(1, 5), journaled=True)


def test_a_journal_of_an_older_version_is_refused(tmp_path: Path) -> None:
    where = tmp_path / "j"
    where.mkdir()
    (where / JOURNAL_FILE).write_text(
        '{"journal": 1, "pipeline": "p"}\n{"spans": [[0, 4]], "bytes": 10, "outputs": 4}\n')
    with pytest.raises(JournalError, match="journal version 1, this one reads version 3"):
        load(where)


def test_a_resumed_run_checkpoints_before_it_has_read_as_far_as_the_items_done(
        tmp_path: Path) -> None:
    """Done before: items 0-1 and 6-9 (a gap, as unordered runs leave).  The resumed run's
    first checkpoints come before its reader has reached item 9: the last recorded read
    still vouches for what is done, and a later checkpoint records the new furthest read."""
    from fitwork.io.inputs import read_items

    source = tmp_path / "in.jsonl"
    source.write_text("".join(f'{{"n": {n}}}\n' for n in range(20)))
    header = identity("p", source, tmp_path / "out.jsonl", units=["a"])
    where = tmp_path / "j"
    reader = read_items(source)
    journal = Journal.start(where, header, reader)
    items = iter(reader)
    for _ in range(10):
        next(items)
    journal.checkpoint([(0, 2), (6, 4)], 60, 6)
    journal.close()
    first = load(where).read
    assert first is not None
    reader = read_items(source)
    journal = Journal.resume(where, header, reader)
    items = iter(reader)
    for _ in range(4):  # items 0-3 read; the run feeds 2 and 3 (its 0 and 1)
        next(items)
    journal.checkpoint([(0, 2)], 80, 8)  # no error: nothing read past item 9 is claimed
    assert load(where).read == first
    for _ in range(8):  # up to item 11 (the run's 5)
        next(items)
    journal.checkpoint([(2, 4)], 120, 12)
    state = load(where)
    assert state.done.intervals == [(0, 12)] and state.read is not None
    assert state.read[1] > first[1]  # read further: the prefix vouched for grew
    journal.close()


LATE = """
import pathlib
import time
from fitwork import Pipeline, unit

@unit
def late(row):
    # the second wave: the run's one slow item, in a frame of its own; slow in the first
    # run only (the one killed), so the resumed run need not wait it out again
    if row["n"] == 2 and not pathlib.Path("slow-started").exists():
        pathlib.Path("slow-started").touch()
        time.sleep(4.0)
    return row

pipeline = Pipeline(late, name="late")
"""


def test_a_wave_s_last_spans_are_journaled_while_the_next_wave_runs(tmp_path: Path) -> None:
    """Items 0 and 1 are done at once, item 2 four seconds later, and no output comes in
    between: the journal records 0 and 1 a checkpoint's interval after they settle, not
    only when the next output comes (a driver killed meanwhile would redo them)."""
    (tmp_path / "job.py").write_text(LATE)
    (tmp_path / "in.jsonl").write_text("".join(f'{{"n": {n}}}\n' for n in range(3)))
    command = [sys.executable, "-m", "fitwork.cli", "run", "job.py:pipeline", "--input",
               "in.jsonl", "--output", "out.jsonl", "-q"]
    run = subprocess.Popen([*command, "--workers", "late=2"], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output, journal = tmp_path / "out.jsonl", tmp_path / "out.jsonl.journal" / JOURNAL_FILE
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "slow-started").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        second_wave = time.monotonic()  # items 0 and 1 went first, one frame a replica
        while time.monotonic() - second_wave < 2.5 and not checkpoints(journal):
            time.sleep(0.05)
        assert run.poll() is None, "the slow item should still be running"
        assert checkpoints(journal) >= 1, "the first wave was not journaled while the second ran"
        assert load(journal.parent).done.count == 2
        assert len(output.read_text().splitlines()) == 2  # and its outputs made durable
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    resumed = subprocess.run([*command, "--resume"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(json.loads(line)["n"] for line in output.read_text().splitlines()) == [0, 1, 2]
