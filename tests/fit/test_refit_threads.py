"""A live re-fit re-allots threads: the record says what changed and why, and replicas
started after it run with the re-fit's allotment."""

from __future__ import annotations

from fitwork import Pipeline, unit
from fitwork.engine.adapt import Adapter, AdaptPolicy, allotment_change, threads_of
from fitwork.engine.core import Measured, Policy, Resize, RunCore, Spawn
from fitwork.engine.core.events import Counters
from fitwork.engine.shell import stages_of
from fitwork.placement import Group, Placement
from fitwork.resources import Resources


@unit
def read(x: int) -> int:
    return x


@unit
def work(x: int) -> int:
    return x


def test_threads_per_replica_are_a_groups_calls_at_once_or_its_cores_rounded_up() -> None:
    placement = Placement((Group("read", 2, io=8), Group("work", 1),
                           Group("work", 3, resources=Resources(cpu=1.4))))
    units = [read, work]
    assert threads_of(placement, units) == {"read": 8, "work": 2}  # the largest group's
    after = Placement((Group("read", 2, io=8), Group("work", 3, resources=Resources(cpu=0.7))))
    line = allotment_change(placement, after, units, {"work": 0.007}, {"work": 100.0})
    assert line.startswith("threads per replica: 'work' 2 -> 1")
    assert "0.70 cores busy" in line
    assert allotment_change(placement, placement, units, {}, {}) == ""


class Answer:
    """A replanner whose re-solve gives ``work`` more replicas at two threads each."""

    def planned_rates(self) -> dict[str, float]:
        return {"read": 100.0, "work": 100.0}

    def predict(self, counts: dict[str, int], rates: dict[str, float],
                cpu: dict[str, float] | None = None, cores: float | None = None) -> float:
        return min(counts[n] * rates[n] for n in counts)

    def refit(self, rates: dict[str, float], cpu: dict[str, float] | None = None) -> Placement:
        return Placement((Group("read", 1, resources=Resources(cpu=0.2)),
                          Group("work", 3, resources=Resources(cpu=2.0))), "refit")


def test_a_refit_that_re_allots_threads_says_so_and_new_replicas_take_them() -> None:
    pipeline = Pipeline(read, work)
    placement = Placement((Group("read", 1, resources=Resources(cpu=0.2)),
                           Group("work", 1, resources=Resources(cpu=1.0))))
    core = RunCore(stages_of(pipeline, placement), placement, Policy(), "r", 0.0)
    workers = {s.stage: s.worker for s in core.start() if isinstance(s, Spawn)}
    adapter = Adapter(Answer(), pipeline.units, AdaptPolicy(window=1.0, interval=5.0,
                                                            min_items=5))
    spawned: list[Spawn] = []
    for tick in range(1, 40):
        now = tick * 0.25
        for stage, worker in workers.items():  # work runs at 25/s per replica, not 100
            rate = 100.0 if stage == 0 else 25.0
            core.handle(Measured(worker, Counters(items_in=int(rate * now), busy_s=now,
                                                  cpu_s=0.01 * rate * now), now))
        proposal = adapter.observe(core, now)
        if proposal:
            for stage, name in enumerate(["read", "work"]):
                out = core.handle(Resize(stage, proposal[name], now))
                spawned += [s for s in out if isinstance(s, Spawn)]
            break
    assert adapter.refits, "the adapter never re-fitted"
    refit = adapter.refits[-1]
    assert "threads per replica: 'work' 1 -> 2" in refit.reason
    assert refit.after == {"read": 1, "work": 3}
    assert [g.resources for g in core.placement.of("work")] == [Resources(cpu=2.0)]
    assert spawned and all(s.group is not None and s.group.resources == Resources(cpu=2.0)
                           for s in spawned)
