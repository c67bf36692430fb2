"""Rows that kill their worker (SIGKILL, as a native decoder's segfault does) cost only
themselves, on every engine whose replicas are processes, from a JSON Lines file and from a
sharded directory into parts, whatever way the unit runs: an item at a time, in batches, or
many calls at once (``io=``)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import fitwork
from fitwork import Pipeline, Source, unit
from fitwork.engine.parts import read_parts
from fitwork.io.inputs import read_items
from fitwork.io.shards import Shard, read_shard

ROWS = 400


def once(n: int) -> bool:
    """1% of rows kill the first worker that meets them."""
    return n % 100 == 31


def always(n: int) -> bool:
    """0.5% of rows kill every worker that meets them."""
    return n % 200 == 57


def crash(row: dict[str, Any]) -> int:
    """The row's number, unless it kills this process (always, or the first time)."""
    n = int(row["n"])
    if always(n):
        os.kill(os.getpid(), signal.SIGKILL)
    if once(n):
        kill_the_first(row["marks"], n)
    return n


def kill_the_first(marks: str, n: int) -> None:
    """Kill this process if it is the first to meet row ``n`` (a marker file in ``marks``
    is made before the kill: the next worker to meet the row lives)."""
    try:
        os.close(os.open(os.path.join(marks, str(n)), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


@unit(cpu=0.5, name="crashy")
def crashy(row: dict[str, Any]) -> int:
    return crash(row)


@unit(cpu=0.5, io=4, name="crashy")
def crashy_io(row: dict[str, Any]) -> int:
    time.sleep(0.002)  # calls overlap: a killer's retry meets others in flight
    return crash(row)


@unit(cpu=0.5, batch_size=8, batch_wait=0.01, name="crashy")
def crashy_batched(rows: list[dict[str, Any]]) -> list[int]:
    return [crash(row) for row in rows]


UNITS = {"plain": crashy, "io": crashy_io, "batched": crashy_batched}


@unit(cpu=0.5)
def tag(n: int) -> dict[str, int]:
    return {"n": n}


def write_rows(path: Path, numbers: range, marks: Path) -> None:
    path.write_text("".join(json.dumps({"n": n, "marks": str(marks), "pad": "x" * 40}) + "\n"
                            for n in numbers))


def survivors() -> Counter[int]:
    return Counter(n for n in range(ROWS) if not always(n))


def letters_of(dead: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in dead.read_text().splitlines()]


@pytest.fixture(params=["local", "ray", "ray-tasks"])
def engine(request: pytest.FixtureRequest) -> str:
    if request.param != "local":
        request.getfixturevalue("ray_cluster")
    return request.param


@pytest.fixture(params=list(UNITS))
def way(request: pytest.FixtureRequest) -> str:
    """How the killing unit runs: an item at a time, in batches, or calls at once (io)."""
    return str(request.param)


def test_rows_that_kill_cost_only_themselves_from_a_jsonl_file(engine: str, way: str,
                                                               tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    write_rows(tmp_path / "in.jsonl", range(ROWS), marks)
    dead = tmp_path / "dead.jsonl"
    options: dict[str, Any] = {"task_replicas": True} if engine == "ray-tasks" else {}
    with fitwork.run(Pipeline(UNITS[way]), read_items(tmp_path / "in.jsonl"),
                     engine=engine.split("-")[0], workers={"crashy": 2}, dead_letter=dead,
                     max_attempts=3, **options) as result:
        outputs = list(result)
    if engine == "ray-tasks" and way == "plain":
        from fitwork.engine.ray.slots import TaskRun

        assert isinstance(result._run, TaskRun)
    assert Counter(outputs) == survivors()  # exactly once, once-killers included
    letters = letters_of(dead)
    assert sorted(d["input"]["n"] for d in letters) == [n for n in range(ROWS) if always(n)]
    assert all(d["kind"] == "poison" and d["attempt"] == 3 and d["item"] == d["input"]["n"]
               for d in letters)  # each alone, by its row number, after max_attempts
    assert sorted(int(p.name) for p in marks.iterdir()) == [n for n in range(ROWS) if once(n)]
    assert result.record.status == "completed" and result.record.poisoned == 2


@pytest.mark.parametrize("reader", ["fused", "own"])
def test_rows_that_kill_cost_only_themselves_from_sharded_files(
        engine: str, way: str, reader: str, tmp_path: Path) -> None:
    """``fused``: the readers run ``crashy`` and die in it; ``own``: readers of their own
    hand rows to ``crashy``'s replicas, which die holding rows of a shard."""
    if engine == "ray-tasks":
        pytest.skip("a sharded run has a reader in front: several units keep actors")
    marks, inputs = tmp_path / "marks", tmp_path / "in"
    marks.mkdir()
    inputs.mkdir()
    for k in range(4):
        write_rows(inputs / f"part{k}.jsonl", range(k * 100, (k + 1) * 100), marks)
    source = Source.files(str(inputs), split_bytes=4_000)  # ~50 rows a shard
    dead, out = tmp_path / "dead.jsonl", tmp_path / "out"
    workers = {"crashy": 2} if reader == "fused" else {"crashy": 2, "read": 2}
    with fitwork.run(Pipeline(UNITS[way], tag), source, engine=engine, workers=workers,
                     output=fitwork.Sink.files(out), dead_letter=dead, max_attempts=3) as result:
        list(result)
    assert Counter(int(r["n"]) for r in read_parts(out)) == survivors()
    letters = letters_of(dead)
    killers = []
    for letter in letters:  # each names its shard and row: read that row back
        shard, row = Shard(*letter["input"]["shard"]), letter["input"]["row"]
        killers.append(int(list(read_shard(shard))[row]["n"]))
        assert letter["kind"] == "poison" and letter["attempt"] == 3
        assert letter["path"] == [row]
    assert sorted(killers) == [n for n in range(ROWS) if always(n)]
    assert result.record.status == "completed" and result.record.poisoned == 2
    assert result.record.items_completed == len(source.shards)


def test_the_issue_repro_finishes_exactly_every_time(tmp_path: Path) -> None:
    """3,000 items from a JSON Lines file, 1% of them kill their worker the first time: a
    replacement that takes the next frame and dies on its bad row is no restart storm."""
    marks = tmp_path / "marks"
    marks.mkdir()
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"n": n, "marks": str(marks)}) + "\n"
                            for n in range(3000) if not always(n)))
    with fitwork.run(Pipeline(crashy), read_items(path), engine="local",
                     workers={"crashy": 2}) as result:
        outputs = list(result)
    assert Counter(outputs) == Counter(n for n in range(3000) if not always(n))
    assert len(list(marks.iterdir())) == 30 and result.record.worker_restarts == 30
    assert result.record.poisoned == 0


def sparse(n: int) -> bool:
    """One row in a thousand kills every worker that meets it."""
    return n % 1000 == 999


@unit(cpu=0.5, name="sparse")
def sparse_killer(row: dict[str, Any]) -> int:
    n = int(row["n"])
    if sparse(n):
        os.kill(os.getpid(), signal.SIGKILL)
    return n


def test_rows_that_kill_every_time_cost_one_death_shared_and_their_attempts(
        tmp_path: Path) -> None:
    """A worker marks the item it runs, so a death names its row: the row is retried
    alone and the rest of its frame goes on.  Each row that kills every time then costs
    one death shared and ``max_attempts`` alone.  (Narrowing whole frames down by groups,
    the killers of 20,000 rows were isolated back to back and the run stopped as a
    restart storm, 3 runs of 3.)"""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"n": n}) + "\n" for n in range(20_000)))
    dead = tmp_path / "dead.jsonl"
    with fitwork.run(Pipeline(sparse_killer), read_items(path), engine="local",
                     workers={"sparse": 2}, dead_letter=dead, max_attempts=3,
                     max_failures=100) as result:
        outputs = list(result)
    killers = [n for n in range(20_000) if sparse(n)]
    assert Counter(outputs) == Counter(n for n in range(20_000) if not sparse(n))
    assert sorted(d["input"]["n"] for d in letters_of(dead)) == killers
    assert result.record.status == "completed"
    # the unit's first death is not named (a worker marks items once its unit has lost
    # one): its frame is narrowed down, which costs a death or two more
    assert 4 * len(killers) <= result.record.worker_restarts <= 4 * len(killers) + 2


def test_a_shard_s_rows_that_kill_every_time_are_named_not_bisected(tmp_path: Path) -> None:
    """A reader marks the row of its shard it reads once its unit has lost a worker, so a
    death names the row: the shard's rest goes again as one piece that remembers it, and a
    row that kills that piece's reader too is read alone.  Each row that kills every time
    costs at most two deaths shared and ``max_attempts`` alone (bisecting the shard by row
    ranges cost about 13 a row: 544 deaths for 40 such rows in 40,000)."""
    deaths, killers = sparse_sharded(tmp_path, files=1, split_bytes=1 << 17,  # ~8,000 rows
                                     workers={"sparse": 2})
    assert 4 * killers <= deaths <= 5 * killers + 2


def sparse_sharded(tmp_path: Path, files: int, split_bytes: int,
                   workers: dict[str, int]) -> tuple[int, int]:
    """20,000 rows in ``files`` files through `sparse_killer`, sharded: every other row's
    output once, each killer dead-lettered; the deaths and the killers."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    size = 20_000 // files
    for k in range(files):
        (inputs / f"rows{k}.jsonl").write_text("".join(
            json.dumps({"n": n}) + "\n" for n in range(k * size, (k + 1) * size)))
    dead, out = tmp_path / "dead.jsonl", tmp_path / "out"
    source = Source.files(str(inputs), split_bytes=split_bytes)
    with fitwork.run(Pipeline(sparse_killer), source, engine="local", workers=workers,
                     output=fitwork.Sink.files(out), dead_letter=dead, max_attempts=3,
                     max_failures=100) as result:
        list(result)
    killers = [n for n in range(20_000) if sparse(n)]
    assert Counter(int(r) for r in read_parts(out)) == \
        Counter(n for n in range(20_000) if not sparse(n))
    assert len(letters_of(dead)) == len(killers)
    assert result.record.status == "completed"
    return result.record.worker_restarts, len(killers)


def test_rows_that_kill_every_time_behind_a_reader_of_its_own_are_named(
        tmp_path: Path) -> None:
    """Rows a reader of its own handed on are named by their path: the shard's rest goes
    again as one piece that remembers the row, and the reader still streaming the shard
    stops (it went on handing every later row, killers too, to the next unit once per
    piece).  Each row that kills every time costs about five deaths; the code before cost
    about 15 (307-317 deaths for these 20 rows: row ranges bisected, streams never
    stopped), and stopping streams without naming 14."""
    deaths, killers = sparse_sharded(tmp_path, files=4, split_bytes=64_000,  # ~5,000 rows
                                     workers={"sparse": 2, "read": 1})
    assert 4 * killers <= deaths <= 7 * killers


FORKS = [0]  # processes this test process forked (the local driver runs in it)
os.register_at_fork(before=lambda: FORKS.__setitem__(0, FORKS[0] + 1))


def test_deaths_after_the_first_are_forked_by_the_zygote_not_the_driver(
        tmp_path: Path) -> None:
    """Every fork of the driver makes it copy each page it writes afterwards (1,400 page
    faults and ~2.5 ms of its CPU a death, measured in bench/poison.py), so once a unit
    lost a worker its spares come from a zygote: 30 deaths fork a handful of processes
    here (the workers, the zygote, a spare or two the zygote was late with), not one each."""
    marks = tmp_path / "marks"
    marks.mkdir()
    rows = [{"n": n, "marks": str(marks)} for n in range(3000) if not always(n)]
    before = FORKS[0]
    with fitwork.run(Pipeline(crashy), rows, engine="local", workers={"crashy": 2}) as result:
        outputs = list(result)
    forks = FORKS[0] - before
    assert Counter(outputs) == Counter(row["n"] for row in rows)  # exactly once
    assert result.record.worker_restarts == 30
    assert forks <= 2 + 1 + 10, forks  # workers, the zygote, a few it was late with
    handed = [w for w in result.record.workers if w.worker_id >= 0]
    assert len(handed) == 2 + 30  # each death was replaced, by a spare or a fork


def spaced(n: int) -> bool:
    """Rows that kill once, 300 rows apart: more than a streamed chunk (128 rows) apart."""
    return n % 300 == 101


@unit(cpu=0.5, name="spaced")
def spaced_killer(row: dict[str, Any]) -> int:
    n = int(row["n"])
    if spaced(n):
        kill_the_first(row["marks"], n)
    return n


def test_a_shard_with_many_once_killers_is_retried_once_a_death(tmp_path: Path) -> None:
    """A streaming reader's piece that died after delivering rows was killed by another
    row: what it had not delivered goes again as one piece, not in halves that each read
    the shard again (two retry frames a death before)."""
    marks, inputs = tmp_path / "marks", tmp_path / "in"
    marks.mkdir()
    inputs.mkdir()
    write_rows(inputs / "rows.jsonl", range(3000), marks)
    source = Source.files(str(inputs), split_bytes=200_000)  # ~1,500 rows a shard
    with fitwork.run(Pipeline(spaced_killer), source, engine="local",
                     workers={"spaced": 2}, output=fitwork.Sink.files(tmp_path / "out"),
                     max_attempts=3) as result:
        list(result)
    assert Counter(int(r) for r in read_parts(tmp_path / "out")) == Counter(range(3000))
    record = result.record
    assert record.worker_restarts == sum(1 for n in range(3000) if spaced(n)) == 10
    assert record.retries == record.worker_restarts, (record.retries, record.worker_restarts)


@pytest.mark.timeout(120)
def test_a_zygote_killed_mid_run_costs_only_a_new_one(tmp_path: Path) -> None:
    """The workers and spares a zygote forked die with it (PR_SET_PDEATHSIG): their exits,
    which it can no longer report, are deaths all the same, and the next spawn forks a new
    zygote; every row once."""
    marks = tmp_path / "marks"
    marks.mkdir()
    rows = [{"n": n, "marks": str(marks)} for n in range(3000) if not always(n)]
    killed: list[int] = []
    outputs = []
    with fitwork.run(Pipeline(crashy), rows, engine="local", workers={"crashy": 2}) as result:
        for out in result:
            outputs.append(out)
            zygotes = result._run.zygotes
            if not killed and zygotes and len(outputs) > 500:
                killed.append(zygotes[0].process.pid)
                os.kill(killed[0], signal.SIGKILL)
        run = result._run
    assert killed, "no zygote was forked"
    assert Counter(outputs) == Counter(row["n"] for row in rows)  # exactly once
    assert result.record.status == "completed" and result.record.worker_restarts >= 30
    assert run.zygotes == {} and run.old_zygotes == []  # all let go at the end
