"""Failure semantics users expect: retries for exceptions, timeouts, dead letters per run."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import fitwork
from fitwork import Pipeline, Retry, UnitDefinitionError, unit

_tries: dict[int, int] = {}
_lock = threading.Lock()


@unit(io=4)
def flaky_io(x: int) -> int:
    """Fails with a reset connection on the first two tries of each odd item."""
    with _lock:
        _tries[x] = _tries.get(x, 0) + 1
        tries = _tries[x]
    if x % 2 and tries < 3:
        raise ConnectionResetError(f"reset on try {tries}")
    return x


@unit
def compute_error(x: int) -> int:
    if x == 3:
        raise KeyError("no such key")
    return x


@unit(retry=Retry(attempts=4, backoff=0.001, on=(KeyError,)))
def retried_key_error(x: int) -> int:
    with _lock:
        _tries[x] = _tries.get(x, 0) + 1
        tries = _tries[x]
    if tries < 4:
        raise KeyError(f"try {tries}")
    return x


@unit(timeout=0.05)
def sometimes_slow(x: int) -> int:
    if x == 2:
        time.sleep(1.0)
    return x


def test_the_defaults_retry_transient_io_errors_and_not_compute_errors() -> None:
    assert flaky_io.policy.attempts == 3 and flaky_io.policy.on == (OSError, TimeoutError)
    assert compute_error.policy.attempts == 1
    _tries.clear()
    with fitwork.run(Pipeline(flaky_io), range(10), engine="sim") as result:
        assert sorted(result) == list(range(10))
    assert result.record.failures == 0


@pytest.mark.parametrize("engine", ["local", "sim"])
def test_a_declared_policy_retries_its_exceptions(engine: str, tmp_path: Path) -> None:
    _tries.clear()
    with fitwork.run(Pipeline(retried_key_error), range(5), engine=engine,
                     dead_letter=tmp_path / "dead.jsonl") as result:
        assert sorted(result) == list(range(5))
    assert result.record.failures == 0 and not (tmp_path / "dead.jsonl").exists()


def test_a_call_past_its_timeout_fails_that_item_only(tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    start = time.monotonic()
    with fitwork.run(Pipeline(sometimes_slow), range(5), dead_letter=dead) as result:
        outputs = sorted(result)
    assert outputs == [0, 1, 3, 4] and time.monotonic() - start < 5
    (letter,) = [json.loads(line) for line in dead.read_text().splitlines()]
    assert letter["item"] == 2 and letter["error"].startswith("TimeoutError")
    assert "timeout=" in letter["error"]


def test_dead_letters_carry_the_run_id_and_each_run_starts_its_own_file(
        tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    with fitwork.run(Pipeline(compute_error), range(6), dead_letter=dead) as first:
        list(first)
    (letter,) = [json.loads(line) for line in dead.read_text().splitlines()]
    assert letter["run_id"] == first.record.run_id and letter["item"] == 3
    assert letter["unit"] == "compute_error" and letter["attempt"] == 1
    with fitwork.run(Pipeline(compute_error), range(3), dead_letter=dead) as second:
        list(second)
    assert not dead.exists(), "a run with no failures leaves no stale dead letters behind"
    assert second.record.dead_letter == str(dead)


def test_bad_policies_are_refused_in_one_line() -> None:
    with pytest.raises(UnitDefinitionError, match="attempts=0 must be >= 1"):
        Retry(attempts=0)
    with pytest.raises(UnitDefinitionError, match="timeout must be > 0"):
        unit(timeout=0)(lambda x: x)
    with pytest.raises(UnitDefinitionError, match="engine 'local' takes no option 'address'"):
        fitwork.run(Pipeline(compute_error), [1], address="auto")
