"""Ray engine calls: frames of many items, arrays stacked in transit, membership pushed."""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
from collections import Counter as Multiset
from typing import Any

import numpy as np
import pytest

import fitwork
from fitwork import Pipeline, unit
from tests.engine import units as u

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'fitwork[ray]'")

from fitwork.engine.ray.routing import Router, key  # noqa: E402
from fitwork.engine.ray.transport import Rows, crosses, frame_bytes, pack  # noqa: E402
from fitwork.engine.segment import Segment  # noqa: E402


@unit
def vector(x: int) -> np.ndarray:
    return np.full(500, x, dtype=np.float64)


@unit
def slow_twice(a: np.ndarray) -> np.ndarray:
    time.sleep(0.002)
    return a * 2


@unit
def vector_sum(a: np.ndarray) -> float:
    return float(a.sum())


@unit
def plus_one(x: int) -> int:
    return x + 1


class Member:
    """A replica stand-in the routers can hold: an actor that does nothing."""

    def ping(self) -> int:
        return os.getpid()


def segment(values: list[Any]) -> Segment:
    return Segment(1, 0, range(len(values)), None, None, values)


def test_same_shape_arrays_cross_as_one_array_and_arrive_as_rows() -> None:
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3) + i for i in range(5)]
    packed = pack([segment(arrays)])
    assert type(packed[0][5]) is Rows
    arrived = pickle.loads(pickle.dumps(packed, protocol=5))[0][5]
    assert type(arrived) is Rows and len(arrived) == 5
    for got, sent in zip(arrived, arrays, strict=True):
        assert got.shape == sent.shape and got.dtype == sent.dtype
        assert np.array_equal(got, sent)


@pytest.mark.parametrize("values", [
    [np.zeros(3), np.zeros(4)],                      # shapes differ
    [np.zeros(3), np.zeros(3, dtype=np.int64)],      # dtypes differ
    [np.zeros(()), np.zeros(())],                    # 0-d: rows would come back scalars
    [np.zeros((3, 2))[:, 0], np.zeros((3, 2))[:, 1]],  # not contiguous
    [np.empty(2, dtype=object), np.empty(2, dtype=object)],
    [np.zeros(3), [0.0, 0.0, 0.0]],
    [np.zeros(3)],                                   # one value: nothing to gain
])
def test_other_values_cross_as_they_are(values: list[Any]) -> None:
    frame = [segment(values)]
    assert pack(frame) is frame


def test_frame_bytes_counts_arrays_by_their_buffers() -> None:
    arrays = [np.zeros(1000) for _ in range(4)]
    assert frame_bytes([segment(arrays)]) == 4 * 8000
    assert frame_bytes([segment([*arrays, {"a": 1}])]) > 4 * 8000
    assert crosses([segment([1, 2.5, "x", b"y", None, np.zeros(2)])])
    assert not crosses([segment([{"a": 1}])])


def test_a_router_keeps_the_newest_members_and_leaves_out_the_dead(ray_cluster: object) -> None:
    a, b, c = (ray.remote(Member).options(num_cpus=0).remote() for _ in range(3))
    router = Router(1, limit=2, timeout=5.0)
    router.set_members([a, b], 2)
    router.set_members([c], 1)  # an older push that arrived late
    assert [key(m) for m in router.members] == [key(a), key(b)]
    router.mark_dead(b)
    router.set_members([a, b, c], 3)  # the driver has not heard of b's death yet
    assert {key(m) for m in router.members} == {key(a), key(c)}
    assert key(router.pick()) in {key(a), key(c)}


def test_a_frame_newer_than_the_members_waits_for_their_push(ray_cluster: object) -> None:
    a = ray.remote(Member).options(num_cpus=0).remote()
    router = Router(1, limit=2, timeout=30.0)
    router.set_members([], 1)
    pusher = threading.Thread(target=router.set_members, args=([a], 2))
    follower = threading.Thread(target=router.follow, args=(2,))
    follower.start()
    pusher.start()
    follower.join()
    pusher.join()
    assert router.version == 2 and [key(m) for m in router.members] == [key(a)]
    assert router.pick(block=False) is not None


def test_a_fast_pipeline_moves_many_items_per_call(ray_cluster: object) -> None:
    items = list(range(4000))
    with fitwork.run(Pipeline(plus_one, u.double), items, engine="ray") as result:
        outputs = list(result)
    assert sorted(outputs) == [2 * (x + 1) for x in items]
    frames = len(result.record.completions.times_s)  # one entry per feed frame settled
    assert frames < len(items) / 20, frames


def test_arrays_cross_replicas_intact_through_a_kill(ray_cluster: object) -> None:
    pipeline = Pipeline(vector, slow_twice, vector_sum)
    items = list(range(600))
    outputs: list[float] = []
    killed = None
    with fitwork.run(pipeline, items, engine="ray", workers={"slow_twice": 2}) as result:
        for output in result:
            outputs.append(output)
            if len(outputs) == 1:  # early: killed at the 60th output under load, the
                killed = result.worker_pids("slow_twice")[0]  # run had done every item
                os.kill(killed, signal.SIGKILL)
    assert killed is not None
    assert Multiset(outputs) == Multiset(pipeline.serial(items))
    record = result.record
    assert record.items_completed == 600 and record.worker_restarts >= 1
    assert record.unit("slow_twice").bytes_in >= 600 * 500 * 8


def test_a_replicas_blas_pool_is_held_to_its_core(
        ray_cluster: object) -> None:
    with fitwork.run(Pipeline(u.matrix_work), range(24), engine="ray") as result:
        assert len(list(result)) == 24
    cpu = result.record.resource("cpu")
    assert cpu.allocated == 1 and 0 < cpu.utilization <= 1.05, cpu


def test_a_replica_the_cluster_cannot_place_fails_the_run_in_one_line(
        ray_cluster: object) -> None:
    """Feeding starts with the replicas that are up; one that is never placed still fails
    the run, naming its unit, once the start-up timeout has passed."""
    from fitwork.errors import EngineError

    start = time.monotonic()
    unplaced = r"^replicas of big_slow were not placed within 3 s: the cluster has .*CPU"
    with pytest.raises(EngineError, match=unplaced), \
            fitwork.run(Pipeline(u.big_slow), range(200), engine="ray",
                        startup_timeout=3) as result:
        list(result)
    assert time.monotonic() - start < 30


def test_a_replica_process_imports_neither_the_run_core_nor_the_record() -> None:
    """A replica (actor or task) reads the core's events and sizing rule, never the state
    machine, the record or pydantic: each costs every replica start-up time."""
    import subprocess
    import sys

    probe = ("import sys, fitwork.engine.ray.replica, fitwork.engine.ray.tasks; "
             "print(sorted(m for m in ('pydantic', 'fitwork.engine.core.machine', "
             "'fitwork.telemetry.record', 'fitwork.placement', 'fitwork.engine.ray.driver') "
             "if m in sys.modules))")
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert shown == "[]"
