"""A Ray run's end gives Ray's worker pool back the workers its actors took (`refill`)."""

from __future__ import annotations

from typing import Any

import psutil
import pytest

import fitwork
from fitwork import Pipeline
from tests.engine import units as u

pytestmark = pytest.mark.usefixtures("ray_cluster")


def pids(outputs: list[tuple[int, str]]) -> set[int]:
    """The processes `units.Counter` ran in (its token: pid-instance)."""
    return {int(token.split("-")[0]) for _, token in outputs}


def test_an_actor_run_refills_the_pool_and_the_next_task_run_starts_warm() -> None:
    import ray

    with fitwork.run(Pipeline(u.Counter), range(200), engine="ray",
                     workers={"Counter": 2}) as result:
        served = list(result)
    actors = {a.pid for a in result._run.actors.values()} | pids(served)
    assert sorted(x for x, _ in served) == list(range(200))
    assert len(result._run.actors) == 2
    refs: list[Any] = result._run.refilled
    cores = int(ray.cluster_resources().get("CPU", 0))
    assert len(refs) == min(2, cores) > 0  # one for each actor the run ended
    refilled = {pid for pid, _ in ray.get(refs, timeout=60)}
    # idle workers, not the actors' (two, or fewer where Ray ran both tasks in a worker the
    # session's earlier runs had left idle: the pool then held one already)
    assert 1 <= len(refilled) <= len(refs) and not refilled & actors
    assert all(psutil.pid_exists(pid) for pid in refilled)  # idle in Ray's pool
    before = set(psutil.pids())
    with fitwork.run(Pipeline(u.Counter), range(200), engine="ray", task_replicas=True,
                     workers={"Counter": 1}) as again:
        tasks = list(again)
    assert sorted(x for x, _ in tasks) == list(range(200))
    # the next run's tasks ran in workers already up (the refilled ones among Ray's idle
    # pool; which idle worker Ray picks depends on what ran before on the session cluster)
    assert pids(tasks) <= before
    assert again._run.refilled == []  # task replicas end no worker: nothing to give back
