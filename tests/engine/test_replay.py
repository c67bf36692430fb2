"""Runs you can replay: a failed run's record carries the core's log, and a fresh core built
from it and handed the logged events gives the same instructions, on every engine."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fitwork
from fitwork import Pipeline, unit
from fitwork.engine.core import (
    Abort,
    Arrived,
    Counters,
    DeadLetter,
    Done,
    Drain,
    Emit,
    Exited,
    Fed,
    Finished,
    FrameSizes,
    Lost,
    Measured,
    Policy,
    Ready,
    Report,
    Resize,
    RestoreCredits,
    Retire,
    RunCore,
    Send,
    Spawn,
    Taken,
    Tick,
)
from fitwork.engine.core.codec import Regroup, Started, decode, encode
from fitwork.engine.segment import Return, Segment
from fitwork.engine.shell import stages_of
from fitwork.errors import TooManyFailures
from fitwork.failure import Failure
from fitwork.io.shards import Slice
from fitwork.io.unreadable import Unreadable
from fitwork.placement import Group, Placement
from fitwork.telemetry.record import CoreLog, Progress, RunRecord, UnitProgress
from tests.engine.replay import assert_replays, logged, replayed
from tests.engine.test_core import UNITS, AdversarialEngine
from tests.engine.units import die_on_13


@unit
def plus_one(x: int) -> int:
    return x + 1


@unit
def always_raises(x: int) -> int:
    raise ValueError(f"cannot take {x}")


def kinds(log: CoreLog) -> list[str]:
    """Every logged instruction's type, in order."""
    return [i["type"] for out in logged(log) for i in out]


def saved_and_loaded(record: RunRecord, tmp_path: Path) -> RunRecord:
    """``record`` as a user reads it back: saved to a file and loaded."""
    path = tmp_path / "record.json"
    record.save(path)
    return RunRecord.load(path)


def test_a_run_that_fails_replays_on_every_engine(engine: str, tmp_path: Path) -> None:
    pipeline = Pipeline(plus_one, always_raises, name="failing")
    with fitwork.run(pipeline, range(300), engine=engine, max_failures=3) as result, \
            pytest.raises(TooManyFailures):
        result.outputs()
    record = saved_and_loaded(result.record, tmp_path)
    assert record.status == "aborted"
    log = assert_replays(record)
    assert kinds(log).count("DeadLetter") >= 4 and kinds(log).count("Abort") == 1
    assert log.config["policy"]["max_failures"] == 3
    assert [s["name"] for s in log.config["stages"]] == ["plus_one", "always_raises"]


@pytest.mark.processes
def test_a_worker_that_dies_until_poison_replays(engine: str, tmp_path: Path) -> None:
    with fitwork.run(Pipeline(die_on_13, name="killing"), range(60), engine=engine,
                     max_failures=0) as result, pytest.raises(TooManyFailures):
        result.outputs()
    log = assert_replays(saved_and_loaded(result.record, tmp_path))
    stimuli = [step.stimulus["type"] for step in log.steps]
    # item 13 killed its process on each of its attempts: a worker (Exited), or on Ray the
    # forked unit process of a replica that had lost one before (the replica lives: Lost)
    assert stimuli.count("Exited") + stimuli.count("Lost") >= 3
    letters = [i for out in logged(log) for i in out if i["type"] == "DeadLetter"]
    assert [(d["failure"]["kind"], d["failure"]["item"]) for d in letters] == [("poison", 13)]
    assert any(i["type"] == "Send" and i["retry"] for out in logged(log) for i in out)


PIPELINE = """
from fitwork import Pipeline, unit

@unit
def parse(row):
    return row["n"]

@unit
def divide(n):
    return 100 // (n - n)

pipeline = Pipeline(parse, divide, name="dividing")
"""


def test_a_failed_cli_run_records_a_log_that_replays(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(PIPELINE)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(80)))
    done = subprocess.run(
        [sys.executable, "-m", "fitwork.cli", "run", "job.py:pipeline", "--input", "in.jsonl",
         "--output", "out.jsonl", "--record", "record.json", "--max-failures", "2", "-q"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "more than max_failures=2" in done.stderr, done.stderr
    record = RunRecord.load(tmp_path / "record.json")
    log = assert_replays(record)
    assert kinds(log).count("DeadLetter") >= 3 and kinds(log).count("Abort") == 1
    assert "ZeroDivisionError" in next(
        i["failure"]["error"] for out in logged(log) for i in out if i["type"] == "DeadLetter")


def test_a_completed_run_keeps_no_log(tmp_path: Path) -> None:
    with fitwork.run(Pipeline(plus_one), range(50), engine="sim") as result:
        assert sorted(result.outputs()) == list(range(1, 51))
    assert result.record.core_log is None
    result.record.save(tmp_path / "record.json")
    assert json.loads((tmp_path / "record.json").read_text())["core_log"] is None


def test_a_log_that_differs_does_not_replay(tmp_path: Path) -> None:
    """The replay can fail: another limit, or a step gone, gives other instructions."""
    pipeline = Pipeline(plus_one, always_raises, name="failing")
    with fitwork.run(pipeline, range(100), engine="sim", max_failures=3) as result, \
            pytest.raises(TooManyFailures):
        result.outputs()
    log = result.record.core_log
    assert log is not None
    looser = log.model_copy(deep=True)
    looser.config["policy"]["max_failures"] = 4
    assert replayed(looser) != logged(looser)
    done = next(i for i, step in enumerate(log.steps) if step.stimulus["type"] == "Done"
                and step.stimulus["failures"])
    shorter = log.model_copy(update={"steps": log.steps[:done] + log.steps[done + 1:]})
    assert replayed(shorter) != logged(shorter)


def test_the_log_keeps_the_last_steps() -> None:
    pipeline = Pipeline(plus_one)
    placement = Placement.declared(pipeline)
    core = RunCore(stages_of(pipeline, placement), placement, Policy(), "r", 0.0, log_size=5)
    assert [type(i).__name__ for i in core.start()] == ["Spawn"]
    for k in range(1, 9):
        core.handle(Tick(k / 10))
    assert core.log.stimuli == 9  # Started and its Spawn, then 8 ticks: the last 5 are kept
    assert [step.stimulus for step in core.log.steps()] == [Tick(k / 10) for k in range(4, 9)]
    kept = CoreLog.model_validate(core.log.to_json())
    assert kept.dropped == 4 and len(kept.steps) == 5
    with pytest.raises(AssertionError, match="4 steps fell off the ring"):
        replayed(kept)


def test_a_refit_regrouping_is_logged_and_replayed() -> None:
    """The adapter sets the core's placement: that is an input too, logged as `Regroup`,
    and the replicas a later resize starts take the new groups."""
    pipeline = Pipeline(plus_one)
    placement = Placement.declared(pipeline)
    core = RunCore(stages_of(pipeline, placement), placement, Policy(), "r", 0.0)
    core.start()
    core.placement = Placement((Group("plus_one", 1, batch_size=4, device_class="cpu-x"),),
                               "refit")
    (spawn,) = core.handle(Resize(0, 2, 0.5))
    assert spawn.group is not None and spawn.group.device_class == "cpu-x"
    log = CoreLog.model_validate(core.log.to_json())
    assert [s.stimulus["type"] for s in log.steps] == ["Started", "Regroup", "Resize"]
    assert replayed(log) == logged(log)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.sampled_from(sorted(UNITS)), min_size=1, max_size=3, unique=True),
       count=st.integers(0, 40), ordered=st.booleans(), seed=st.integers(0, 10**6),
       death=st.sampled_from([0.05, 0.2]), ghost=st.sampled_from([0.0, 0.5]),
       spans=st.booleans())
def test_a_run_whose_workers_die_at_random_replays(names: list[str], count: int,
                                                   ordered: bool, seed: int, death: float,
                                                   ghost: float, spans: bool) -> None:
    """Whatever order events come in, and whatever dies when (retries, groups, singles,
    poison, outputs arriving twice), the logged events replay to the same instructions."""
    pipeline = Pipeline([UNITS[n] for n in names], name="model")
    policy = Policy(ordered=ordered, max_attempts=4, max_frames=6, ordered_window=16,
                    spans=spans)
    model = AdversarialEngine(pipeline, list(range(count)), policy, random.Random(seed),
                              death, ghost)
    model.run()
    log = CoreLog.model_validate(json.loads(json.dumps(model.core.log.to_json())))
    assert log.dropped == 0 and len(log.steps) == model.core.log.stimuli
    assert replayed(log) == logged(log)


def sample_entries() -> list[Any]:
    """One of each kind of entry, with the shapes that need care (ranges, paths, exponents,
    pieces of a shard, an unreadable line, failures, a group, a progress snapshot)."""
    failure = Failure(unit="u", error="ValueError: x", path=(2, 1), frame=3, offset=1, item=7,
                      run_id="r")
    segment = Segment(3, 1, [0, 2], [(0,), (1, 4)], [1, 2], [None, None])
    group = Group("u", 2, batch_size=8, nodes=(0, 1), io=4)
    return [
        Started(), Fed([None] * 3, 0.5), Fed([Unreadable("bad", "f.jsonl", line=3, rows=(1, 2))],
                                           0.6, end=True),
        Ready(1, 99, 0.1, node="n", build_cpu_s=0.25),
        Taken(1, 4, [(4, range(0, 3)), (5, [1, 2])], 0.2),
        Done(1, [4], [Return(4, [1], [3])], [failure], 0.3, Counters(3, 2, 10, 9, 0.5),
             [(0.1, 0.2)]),
        Measured(1, Counters(1, 1), 0.4, [(0.3, 0.35)]), Arrived([segment], 0.5, (), [failure]),
        Exited(2, False, 0.6, "killed", -9, None), Lost(1, 4, 0.7, parts=[(4, [0])], stage=0,
                                                       blame=False),
        Tick(0.8, 2), Resize(0, 3, 0.9, "refit"), Regroup(Placement((group,), "refit")),
        Send(5, Segment(5, 2, range(1), None, None, [Slice(None, 4, None)]), retry=True),
        Spawn(3, 0, group), Spawn(4, 1), Retire(3, 0), DeadLetter(failure),
        Emit([None] * 4, (10, 2)), Emit([]), FrameSizes((4, 8), (True, False)), RestoreCredits(),
        Abort(TooManyFailures("4 items failed")),
        Report(Progress(1.5, 10, 8, 8, 1, {"u": 2}, {"u": UnitProgress(2, 10, 9, 0.5, 0.4)})),
        Drain(1), Finished(),
    ]


def test_every_kind_of_entry_reads_back_as_it_was_written() -> None:
    for entry in sample_entries():
        data = json.loads(json.dumps(encode(entry)))
        again = decode(data)
        assert type(again) is type(entry) and encode(again) == data, data
    arrived = decode(encode(sample_entries()[7]))
    assert arrived.segments[0].paths == [(0,), (1, 4)]
    assert arrived.failures[0].path == (2, 1)
    with pytest.raises(ValueError, match="unknown type 'Nope'"):
        decode({"type": "Nope"})
