"""The engine contract: every engine must pass these, item for item."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter as Multiset
from pathlib import Path

import pytest

import fitwork
from fitwork import Pipeline, TooManyFailures
from tests.engine import units as u


def run_all(pipeline: Pipeline, items: list, engine: str, **options) -> tuple[list, object]:
    with fitwork.run(pipeline, items, engine=engine, **options) as result:
        outputs = list(result)
    return outputs, result.record


def test_outputs_equal_a_serial_run(engine: str) -> None:
    pipeline = Pipeline(u.double, u.multiple_of_three, u.explode, u.tag_batch)
    items = list(range(500))
    outputs, record = run_all(pipeline, items, engine, workers={"double": 2, "explode": 2})
    expected = list(pipeline.serial(items))
    assert Multiset(outputs) == Multiset(expected)
    assert record.items_completed == 500
    assert record.outputs == len(expected)


def test_ordered_restores_input_order(engine: str) -> None:
    pipeline = Pipeline(u.jitter, u.explode)
    items = list(range(200))
    outputs, _ = run_all(pipeline, items, engine, workers={"jitter": 3}, ordered=True)
    assert outputs == list(pipeline.serial(items))


def test_unordered_is_the_default_and_loses_nothing(engine: str) -> None:
    pipeline = Pipeline(u.jitter)
    outputs, _ = run_all(pipeline, list(range(200)), engine, workers={"jitter": 3})
    assert sorted(outputs) == list(range(200))


@pytest.mark.processes
def test_batches_fill_to_the_batch_size(engine: str) -> None:
    outputs, _ = run_all(Pipeline(u.batch_sizes), list(range(64)), engine)
    assert sorted(x for x, _ in outputs) == list(range(64))
    assert {size for _, size in outputs} == {8}


@pytest.mark.processes
def test_batches_close_at_the_wait_limit(engine: str) -> None:
    def trickle():
        for i in range(12):
            time.sleep(0.03)
            yield i

    with fitwork.run(Pipeline(u.quick_batches), trickle(), engine=engine) as result:
        outputs = list(result)
    assert sorted(x for x, _ in outputs) == list(range(12))
    assert max(size for _, size in outputs) < 8


@pytest.mark.processes
def test_a_run_s_last_partial_batch_does_not_wait_out_batch_wait(engine: str) -> None:
    # 5 batches of 8 and 4 left over; the unit would hold those 4 for 60 s for more to come
    started = time.monotonic()
    outputs, _ = run_all(Pipeline(u.double, u.patient_batches), list(range(44)), engine)
    assert sorted(x for x, _ in outputs) == [2 * i for i in range(44)]
    assert time.monotonic() - started < 30, "the last batch sat out its batch_wait"


def test_flat_map_and_filter(engine: str) -> None:
    pipeline = Pipeline(u.multiple_of_three, u.explode)
    items = list(range(300))
    outputs, record = run_all(pipeline, items, engine)
    assert Multiset(outputs) == Multiset(pipeline.serial(items))
    assert record.unit("multiple_of_three").items_out == 100
    assert record.items_completed == 300


def test_failures_go_to_dead_letters_and_the_run_continues(engine: str, tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    outputs, record = run_all(Pipeline(u.fail_on_sevens), list(range(100)), engine,
                              dead_letter=dead)
    assert sorted(outputs) == [x for x in range(100) if x % 7]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert sorted(letter["input"] for letter in letters) == list(range(0, 100, 7))
    first = letters[0]
    assert first["unit"] == "fail_on_sevens"
    assert first["error"].startswith("ValueError: seven divides")
    assert "Traceback" in first["traceback"]
    assert {"item", "unit", "error", "traceback", "input"} <= set(first)
    assert record.failures == 15


def test_max_failures_stops_the_run(engine: str, tmp_path: Path) -> None:
    with (pytest.raises(TooManyFailures, match="max_failures=3"),
          fitwork.run(Pipeline(u.fail_on_sevens), range(1000), engine=engine, max_failures=3,
                                          dead_letter=tmp_path / "dead.jsonl") as result):
        list(result)


@pytest.mark.processes
def test_kill_9_of_a_random_worker_loses_and_duplicates_nothing(engine: str) -> None:
    pipeline = Pipeline(u.slow_identity, u.slow_square, u.explode)
    items = list(range(600))
    outputs = []
    rng = random.Random(7)
    killed = []
    with fitwork.run(pipeline, items, engine=engine,
                      workers={"slow_identity": 2, "slow_square": 2}) as result:
        for output in result:
            outputs.append(output)
            if len(outputs) in (60, 200):
                victim = rng.choice(result.worker_pids())
                killed.append(victim)
                os.kill(victim, signal.SIGKILL)
    assert len(killed) == 2
    assert Multiset(outputs) == Multiset(pipeline.serial(items))
    assert result.record.worker_restarts >= 2


@pytest.mark.processes
@pytest.mark.parametrize("killer, signal_name", [(u.die_on_13, "SIGKILL"),
                                                  (u.segfault_on_13, "SIGSEGV")])
def test_a_poison_item_is_dead_lettered_after_max_attempts(
        engine: str, tmp_path: Path, killer, signal_name: str) -> None:
    dead = tmp_path / "dead.jsonl"
    outputs, record = run_all(Pipeline(killer), list(range(60)), engine,
                              dead_letter=dead, max_attempts=3)
    assert sorted(outputs) == [x for x in range(60) if x != 13]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(d["input"], d["kind"]) for d in letters] == [(13, "poison")]
    # The local engine sees the signal; so does a Ray replica whose unit runs in a forked
    # child, as its replacement does after the first death (the last attempt's cause).
    assert signal_name in letters[0]["error"]
    assert record.poisoned == 1 and letters[0]["attempt"] == 3
    # three deaths alone, and those it shared: its frame's, and of each retry group that
    # narrowed it down (60 items: a group of at most 60, of 8, of 3, then alone)
    assert 3 <= record.worker_restarts <= 3 + 4


@pytest.mark.processes
def test_an_output_that_cannot_cross_processes_is_dead_lettered(engine: str,
                                                               tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    outputs, record = run_all(Pipeline(u.unpicklable_on_5, u.double), list(range(20)), engine,
                              dead_letter=dead)
    assert sorted(outputs) == [2 * x for x in range(20) if x != 5]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [d["item"] for d in letters] == [5] and "cannot cross processes" in letters[0]["error"]
    assert record.worker_restarts == 0


@pytest.mark.processes
def test_large_arrays_cross_intact(engine: str) -> None:
    outputs, record = run_all(Pipeline(u.make_array, u.array_sum), list(range(20)), engine)
    assert sorted(outputs) == [300_000.0 * x for x in range(20)]
    assert record.unit("array_sum").bytes_in >= 20 * 300_000 * 8


@pytest.mark.processes
def test_io_units_run_calls_concurrently(engine: str) -> None:
    outputs, _ = run_all(Pipeline(u.concurrent_sleep), list(range(32)), engine)
    assert sorted(x for x, _ in outputs) == list(range(32))
    assert max(peak for _, peak in outputs) >= 4


def test_async_units(engine: str) -> None:
    outputs, _ = run_all(Pipeline(u.async_double), list(range(50)), engine)
    assert sorted(outputs) == [2 * x for x in range(50)]


def test_class_units_are_built_once_per_replica(engine: str) -> None:
    """Each replica that ran items built the class once: as many instances as replicas
    that served (both, unless one took every item before the other started, which a
    short run on Ray may see: feeding starts with the first replica ready)."""
    outputs, record = run_all(Pipeline(u.Counter), list(range(200)), engine)
    assert sorted(x for x, _ in outputs) == list(range(200))
    served = [w for w in record.workers if w.unit == "Counter" and w.items_in]
    assert 1 <= len(served) <= 2
    assert len({token for _, token in outputs}) == len(served)


@pytest.mark.processes
def test_the_record_accounts_for_the_run(engine: str) -> None:
    pipeline = Pipeline(u.slow_identity, u.double)
    _, record = run_all(pipeline, list(range(200)), engine)
    assert record.items_in == record.items_completed == record.outputs == 200
    identity = record.unit("slow_identity")
    assert identity.items_in == identity.items_out == 200
    assert 0.0 < identity.busy_fraction <= 1.0
    assert identity.busy_s >= 200 * 0.002 * 0.9
    cpu = record.resource("cpu")
    assert cpu.allocated == 2 and 0.0 < cpu.utilization <= 1.0
    assert record.latency_p50_s is not None and record.latency_p50_s <= record.latency_p95_s
    assert len(record.queue.times_s) == len(record.queue.depths["double"])
    assert all(w.busy_intervals for w in record.workers if w.unit == "slow_identity")
    json.loads(record.model_dump_json())


def test_gpu_replicas_take_the_given_gpus_in_turn() -> None:
    outputs, record = run_all(Pipeline(u.which_gpu), list(range(60)), "local",
                              workers={"which_gpu": 3}, gpus=("0", "1"))
    assert sorted(x for x, _, _ in outputs) == list(range(60))
    seen: dict[int, set[str]] = {}
    for _, pid, gpu in outputs:
        seen.setdefault(pid, set()).add(gpu)
    assert {w.pid for w in record.workers if w.items_in} == set(seen)
    assert len(seen) == 3, f"{len(seen)} of 3 replicas served items"
    assert all(len(gpus) == 1 for gpus in seen.values()), seen  # one GPU for a replica's life
    # Three replicas on two GPUs in turn: GPU 0, GPU 1, GPU 0.
    assert sorted(gpus.pop() for gpus in seen.values()) == ["0", "0", "1"]


def test_visible_gpus_reads_cuda_visible_devices() -> None:
    from fitwork.engine.local.driver import visible_gpus

    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ("2", "3")
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == ()


def test_the_fused_baseline_gives_the_same_outputs(engine: str) -> None:
    pipeline = Pipeline(u.double, u.multiple_of_three, u.explode, u.tag_batch)
    items = list(range(120))
    outputs, record = run_all(pipeline.fused(), items, engine, workers={"pipeline_fused": 2})
    assert Multiset(outputs) == Multiset(pipeline.serial(items))
    assert record.units[0].replicas == 2


def test_replica_counts_change_mid_run_under_kill_9(engine: str) -> None:
    pipeline = Pipeline(u.slow_identity, u.slow_square, u.explode)
    items = list(range(600))
    chaos = {"kill_rate": 3.0, "seed": 5, "max_attempts": 10} if engine == "sim" else {}
    rng = random.Random(11)
    outputs = []
    with fitwork.run(pipeline, items, engine=engine,
                     workers={"slow_identity": 1, "slow_square": 1}, **chaos) as result:
        for output in result:
            outputs.append(output)
            count = len(outputs)
            if count == 40:
                result.resize("slow_square", 3)
                result.resize("slow_identity", 2)
            elif count == 250:
                result.resize("slow_square", 1)
            if count in (120, 320) and engine != "sim":
                os.kill(rng.choice(result.worker_pids()), signal.SIGKILL)
    assert Multiset(outputs) == Multiset(pipeline.serial(items))
    record = result.record
    squares = record.replicas.counts["slow_square"]
    assert squares[0] == 1 and max(squares) == 3 and squares[-1] == 1, squares
    assert max(record.replicas.counts["slow_identity"]) == 2
    assert record.worker_restarts >= 1 and record.items_completed == 600


def test_a_missing_extra_is_named_with_its_install_line() -> None:
    """An engine or call that needs a package missing here says which extra installs it."""
    from fitwork.engine.registry import needs_extra

    assert needs_extra("engine 'x'", "json") is None  # installed: nothing to say
    said = needs_extra("release_warm", "no_such_package_zz")
    assert said == ("release_warm needs No_Such_Package_Zz: install the extra with "
                    "pip install 'fitwork[no_such_package_zz]'")
