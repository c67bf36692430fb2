"""A warm pool on a long-lived Ray cluster: a run keeps its replicas, the next adopts them.

A one-node Ray cluster held by a process of its own (its own temp dir), and ``fitwork run
--engine ray --ray-address ... --keep-warm S`` twice through the real CLI, each run a
driver process of its own: the second run's record says it adopted the replicas the first
kept (the same actor ids), both runs' outputs are exact, a class unit that notes its first
call gives each run a fresh instance, and the pool is gone once its time has passed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.held_ray import env, held_cluster

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="Ray is not installed: pip install 'fitwork[ray]'")
FITWORK = str(Path(sys.executable).with_name("fitwork"))
ITEMS = 300
KEEP_S = 8.0

PIPE = textwrap.dedent("""
    from fitwork import Pipeline, unit

    def square(x):
        return x * x

    class Stamp:
        '''Marks the first item this instance sees: a kept instance would mark none.'''

        def __init__(self):
            self.first = True

        def __call__(self, x):
            first, self.first = self.first, False
            return [x + 1, first]

    pipeline = Pipeline(unit(square, cpu=0.5), unit(Stamp, name="stamp", cpu=0.5),
                        name="warm")
""")

NAMED = textwrap.dedent("""
    import json, sys, time, ray
    ray.init(address=sys.argv[1], log_to_driver=False)
    deadline = time.monotonic() + float(sys.argv[3])
    while True:
        named = [a for a in ray.util.list_named_actors(all_namespaces=True)
                 if a["namespace"] == sys.argv[2]]
        if not named or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    print(json.dumps(named))
""")




@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The address of a 2-CPU Ray cluster on this host, held by a process of its own."""
    with held_cluster("fw-warm-") as address:
        yield address


def _warm_run(folder: Path, address: str, name: str) -> tuple[list[list[int]], dict]:
    """One CLI run kept warm; its outputs (in input order) and its record's warm pool."""
    done = subprocess.run(
        [FITWORK, "run", "pipe.py:pipeline", "--engine", "ray", "--ray-address", address,
         "--input", "in.jsonl", "--output", f"{name}.jsonl", "--record", f"{name}.json",
         "--workers", "stamp=1", "--ordered", "--keep-warm", str(KEEP_S), "-q"],
        cwd=folder, capture_output=True, text=True, timeout=120, env=env())
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = [json.loads(line) for line in (folder / f"{name}.jsonl").read_text().splitlines()]
    record = json.loads((folder / f"{name}.json").read_text())
    return outputs, record["host"]["warm_pool"]


@pytest.mark.timeout(180)
def test_a_second_run_adopts_the_warm_replicas_and_the_pool_leaves_after_its_time(
        cluster: str, tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(PIPE)
    (tmp_path / "in.jsonl").write_text("".join(f"{i}\n" for i in range(ITEMS)))
    expected = [[i * i + 1, False] for i in range(ITEMS)]

    first, pool = _warm_run(tmp_path, cluster, "first")
    assert pool["adopted"] == 0 and pool["kept"] == 2, pool
    second, again = _warm_run(tmp_path, cluster, "second")
    assert again["namespace"] == pool["namespace"]
    assert again["adopted"] == 2 and again["adopted_ids"] == pool["kept_ids"], (pool, again)
    for outputs in (first, second):  # exact, and a fresh Stamp: one first item each run
        assert [[x, False] for x, _ in outputs] == expected
        assert sum(1 for _, first_call in outputs if first_call) == 1

    started = time.monotonic()
    listed = subprocess.run([sys.executable, "-c", NAMED, cluster, again["namespace"],
                             str(KEEP_S + 10)], capture_output=True, text=True,
                            timeout=60, env=env())
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert json.loads(listed.stdout.strip().splitlines()[-1]) == []  # gone after its time
    assert time.monotonic() - started < KEEP_S + 10


def test_the_prediction_after_a_ray_run_takes_the_start_up_it_measured() -> None:
    from types import SimpleNamespace

    from fitwork.engine.ray.costs import for_record, predicted, startup_seconds

    def record(start: dict[str, float]) -> SimpleNamespace:
        return SimpleNamespace(workers=[1, 2], worker_restarts=0, units=[1],
                               items_completed=4000, host={"cores": 2.0, "ray_start": start})

    steady = predicted(20_000.0, 4000, 0, 1, 2.0)
    warm, said = for_record(20_000.0, record({"feeding": 0.02}))
    assert warm == pytest.approx(4000 / (0.02 + 4000 / steady))
    assert "0.02 s as measured" in said
    cold, _ = for_record(20_000.0, record({}))  # no measurement: the model's start-up
    assert cold == pytest.approx(4000 / (startup_seconds(2, 2.0) + 4000 / steady))


def _hold(x: int) -> int:
    return x + 1


def _other(x: int) -> int:
    return 2 * x


@pytest.mark.timeout(180)
def test_a_run_the_cluster_has_no_room_for_frees_the_cores_an_idle_pool_holds(
        ray_cluster: object) -> None:
    """A pool parked on every core of the cluster gives them back to another pipeline's
    run at once, not after its time (the run would wait out its start-up timeout)."""
    import ray

    import fitwork
    from fitwork import Pipeline, unit

    cores = ray.cluster_resources()["CPU"]
    holding = Pipeline(unit(_hold, cpu=cores / 2), unit(_other, cpu=cores / 2), name="hold")
    with fitwork.run(holding, range(50), engine="ray", keep_warm=120.0) as result:
        assert sorted(result) == [2 * (x + 1) for x in range(50)]
    assert (result.record.host or {})["warm_pool"]["kept"] == 2
    assert ray.available_resources().get("CPU", 0.0) < cores / 2  # parked, holding

    started = time.monotonic()
    other = Pipeline(unit(_other, cpu=cores / 2), name="other")
    with fitwork.run(other, range(50), engine="ray", startup_timeout=20.0) as result:
        assert sorted(result) == [2 * x for x in range(50)]
    assert time.monotonic() - started < 20.0
    space = (result.record.host or {}).get("warm_pool", {}).get("namespace")
    assert space is None  # kept no pool of its own
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True)
                if a["namespace"].startswith("fitwork-warm-")]


@pytest.mark.timeout(180)
def test_release_warm_stops_a_parked_pool_and_frees_its_cores(ray_cluster: object) -> None:
    """`fitwork.release_warm` stops the replicas a pool parked (their cores free at once,
    not after the pool's time) and says how many."""
    import ray

    import fitwork
    from fitwork import Pipeline, unit

    cores = ray.cluster_resources()["CPU"]
    holding = Pipeline(unit(_hold, cpu=cores / 2), unit(_other, cpu=cores / 2), name="held")
    with fitwork.run(holding, range(50), engine="ray", keep_warm=120.0) as result:
        assert sorted(result) == [2 * (x + 1) for x in range(50)]
    assert (result.record.host or {})["warm_pool"]["kept"] == 2
    assert fitwork.release_warm() == 2
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True)
                if a["namespace"].startswith("fitwork-warm-")]
    deadline = time.monotonic() + 10
    while ray.available_resources().get("CPU", 0.0) < cores and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("CPU", 0.0) == pytest.approx(cores)
    assert fitwork.release_warm() == 0  # nothing parked is left


def test_release_warm_unconnected_says_what_to_do() -> None:
    done = subprocess.run([sys.executable, "-c", "import fitwork; fitwork.release_warm()"],
                          capture_output=True, text=True, timeout=60, env=env())
    assert done.returncode != 0
    assert "not connected to a Ray cluster; call ray.init(address=...)" in done.stderr
