"""Test helper: replay a run record's core log into a fresh core, instruction by instruction."""

from __future__ import annotations

from typing import Any

from fitwork.engine.core.codec import Regroup, Started, decode, decode_config, encode
from fitwork.engine.core.log import stripped
from fitwork.engine.core.machine import RunCore
from fitwork.telemetry.record import CoreLog, RunRecord


def replayed(log: CoreLog) -> list[list[dict[str, Any]]]:
    """The instructions a fresh core, built from the log's config, gives for each logged
    stimulus, written as the log writes them (items as their count)."""
    assert log.dropped == 0, f"{log.dropped} steps fell off the ring: cannot replay from the start"
    core = RunCore(*decode_config(log.config))
    given = []
    for step in log.steps:
        stimulus = decode(step.stimulus)
        if isinstance(stimulus, Started):
            out = core.start()
        elif isinstance(stimulus, Regroup):  # what the adapter does
            core.placement = stimulus.placement
            out = []
        else:
            out = core.handle(stimulus)
        given.append([encode(stripped(i)) for i in out])
    return given


def logged(log: CoreLog) -> list[list[dict[str, Any]]]:
    """The instructions the run's core gave, step by step, as its record holds them."""
    return [step.out for step in log.steps]


def assert_replays(record: RunRecord) -> CoreLog:
    """Replay ``record``'s core log; fail at the first step whose instructions differ."""
    log = record.core_log
    assert log is not None, f"a {record.status} run's record has no core log"
    assert log.steps and log.steps[0].stimulus == {"type": "Started"}
    for index, (want, got) in enumerate(zip(logged(log), replayed(log), strict=True)):
        assert got == want, (f"step {index} ({log.steps[index].stimulus['type']}) gave "
                             f"{got}, the run's core gave {want}")
    return log
