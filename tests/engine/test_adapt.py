"""Live re-fitting: a unit that slows down mid-run, a plan that follows it."""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

import fitwork
from fitwork import Pipeline, unit
from fitwork.engine.adapt import Adapter, AdaptPolicy
from fitwork.fit.plan import plan_for
from fitwork.hardware.fleet import Fleet
from fitwork.placement import Group, Placement
from fitwork.profiling.record import BatchMeasurement, PipelineProfile, UnitProfile

FLEET = Fleet.parse({"name": "box", "node_types": [
    {"name": "box", "count": 1, "cores": 8, "memory": "32GiB"}]})


@unit
def read(x: int) -> int:
    return x


@unit
def work(x: int) -> int:
    return x * 3


@unit
def write(x: int) -> int:
    return x + 1


PIPELINE = Pipeline(read, work, write, name="slowing")


def profile(work_seconds: float) -> PipelineProfile:
    def measured(name: str, seconds: float) -> UnitProfile:
        return UnitProfile(name=name, kind="map", resources={"cpu": 1.0, "memory": 1 << 20},
                           device_class="cpu-x86", samples=32, wall_s=seconds,
                           cpu_s=seconds, bytes_in=100, bytes_out=100, output_ratio=1.0,
                           peak_rss=1 << 20, reserve=True)

    return PipelineProfile(fitwork_version="t", pipeline="slowing", host_class="cpu-x86",
                           created_at=0.0, units=[measured("read", 0.001),
                                                  measured("work", work_seconds),
                                                  measured("write", 0.001)])


def steady_rate(record: fitwork.RunRecord, start: float, end: float) -> float:
    """Items/s settled between two moments, from the measured completions."""
    times, done = record.completions.times_s, record.completions.completed
    first = next(i for i, t in enumerate(times) if t >= start)
    last = max(i for i, t in enumerate(times) if t <= end)
    return (done[last] - done[first]) / (times[last] - times[first])


def test_a_unit_four_times_slower_after_a_third_is_re_fitted_and_throughput_recovers() -> None:
    plan = plan_for(profile(0.002), FLEET, fuse=False)
    rates = {g.unit: g.rate for g in plan.placement().groups}
    slow = rates["work"] / 4
    items = list(range(12_000))
    change = len(items) / plan.fitted.throughput / 3  # a third of the way through
    schedule = {"work": [(change, slow)]}
    fresh = plan_for(profile(0.008), FLEET, fuse=False).fitted.throughput

    with fitwork.run(PIPELINE, items, engine="sim", placement=plan, schedule=schedule,
                     adapt=True) as adapting:
        outputs = list(adapting)
    with fitwork.run(PIPELINE, items, engine="sim", placement=plan,
                     schedule=schedule) as fixed:
        list(fixed)
    record, stuck = adapting.record, fixed.record

    assert Counter(outputs) == Counter(x * 3 + 1 for x in items)
    assert record.refits, "the slowdown should have been noticed"
    refit = record.refits[0]
    assert refit.t_s > change and refit.after["work"] > refit.before["work"]
    assert "work" in refit.reason and refit.predicted_after > refit.predicted_before
    end = record.wall_s
    recovered = steady_rate(record, refit.t_s + 1.0, end * 0.95)
    print(f"fresh plan {fresh:,.0f} items/s; adapted {recovered:,.0f}; fixed "
          f"{steady_rate(stuck, change + 1.0, stuck.wall_s * 0.95):,.0f}")
    assert recovered >= 0.8 * fresh
    assert recovered > 1.2 * steady_rate(stuck, change + 1.0, stuck.wall_s * 0.95)
    counts = record.replicas.counts["work"]
    assert counts[0] == plan.placement().replicas("work") and max(counts) > counts[0]


class FixedReplanner:
    """A replanner with a known answer, to test the adapter's rules on their own."""

    def __init__(self, rates: dict[str, float], answer: dict[str, int]) -> None:
        self.rates, self.answer, self.calls = rates, answer, 0

    def planned_rates(self) -> dict[str, float]:
        return dict(self.rates)

    def predict(self, counts: dict[str, int], rates: dict[str, float],
                cpu: dict[str, float] | None = None, cores: float | None = None) -> float:
        return min(counts[n] * rates[n] for n in counts)

    def refit(self, rates: dict[str, float], cpu: dict[str, float] | None = None) -> Placement:
        self.calls += 1
        return Placement(tuple(Group(n, c) for n, c in self.answer.items()), "refit")


def _driven(counters: Callable[[int, float], tuple[int, float]]
            ) -> tuple[Adapter, list[tuple[float, dict[str, int] | None]]]:
    """An adapter over a two-stage run core (``read`` and ``work``, one replica each, both
    planned at 100 items/s) fed ``counters(stage, now)`` (items in, busy seconds) every
    0.25 s for 10 s, its proposals applied as the shell applies them."""
    from fitwork.engine.core import Measured, Policy, Resize, RunCore, Spawn
    from fitwork.engine.core.events import Counters
    from fitwork.engine.shell import stages_of

    pipeline = Pipeline(read, work)
    placement = Placement.declared(pipeline, {"read": 1, "work": 1})
    core = RunCore(stages_of(pipeline, placement), placement, Policy(), "r", 0.0)
    workers = {s.stage: s.worker for s in core.start() if isinstance(s, Spawn)}
    replanner = FixedReplanner({"read": 100.0, "work": 100.0}, {"read": 1, "work": 3})
    adapter = Adapter(replanner, pipeline.units, AdaptPolicy(window=1.0, interval=5.0,
                                                             min_items=5))
    proposals = []
    for tick in range(1, 40):
        now = tick * 0.25
        for stage, worker in workers.items():
            items, busy = counters(stage, now)
            core.handle(Measured(worker, Counters(items_in=items, busy_s=busy), now))
        proposal = adapter.observe(core, now)
        proposals.append((now, proposal))
        for stage, name in enumerate(["read", "work"]):
            if proposal:
                core.handle(Resize(stage, proposal[name], now))
    return adapter, proposals


def test_the_adapter_waits_a_window_and_keeps_to_its_interval() -> None:
    def counters(stage: int, now: float) -> tuple[int, float]:  # work: 25/s, not 100
        return int((100.0 if stage == 0 else 25.0) * now), now

    adapter, proposals = _driven(counters)
    made = [(t, p) for t, p in proposals if p]
    assert made and made[0][1] == {"read": 1, "work": 3}
    assert made[0][0] >= 1.5  # a window to measure, then a window of being off
    assert len(made) == 1, "the same proposal is not made again and again"
    assert adapter.refits[0].before == {"read": 1, "work": 1}
    assert adapter.refits[0].predicted_after == pytest.approx(75.0)


def test_a_window_without_a_reading_does_not_end_the_time_a_unit_is_off() -> None:
    """A replica credited only as its frames settle (many items each) has windows with no
    reading at all: that is no evidence it is back on plan, so the window it was off in
    goes on (a fused replica of 4 calls at once, 6x slower than planned, had gone 8 s
    without a re-fit in one run of three: each empty window had restarted the count)."""
    def counters(stage: int, now: float) -> tuple[int, float]:
        settled = (int(now) // 2) * 2.0  # work's frames settle every 2 s, 25 items/s
        return (int(100 * now), now) if stage == 0 else (int(25 * settled), settled)

    adapter, made = _driven(counters)
    proposals = [(t, p) for t, p in made if p]
    assert proposals and proposals[0][1] == {"read": 1, "work": 3}, adapter.refits
    assert "unit 'work' runs at 25.0" in adapter.refits[0].reason


def test_a_unit_slowed_by_waiting_for_cores_gets_no_more_replicas() -> None:
    """Its rate per replica halves, but its CPU per item does not: the cores are the limit,
    and more replicas would only queue for them (a busier host, not a slower unit)."""
    from fitwork.engine.core import Measured, Policy, RunCore, Spawn
    from fitwork.engine.core.events import Counters
    from fitwork.engine.shell import stages_of
    from fitwork.fit.replan import PlanReplanner

    two = Fleet.parse({"name": "two", "node_types": [
        {"name": "two", "count": 1, "cores": 2, "memory": "8GiB"}]})
    busy = profile(0.010).model_copy(update={"units": [
        u.model_copy(update={"reserve": False}) for u in profile(0.010).units]})
    plan = plan_for(busy, two, fuse=False)
    placement = plan.placement()
    core = RunCore(stages_of(PIPELINE, placement), placement, Policy(), "r", 0.0)
    workers = {s.worker: s.stage for s in core.start() if isinstance(s, Spawn)}
    adapter = Adapter(PlanReplanner(plan, placement), PIPELINE.units,
                      AdaptPolicy(window=1.0, interval=1.0))
    seconds = {0: 0.001, 1: 0.010, 2: 0.001}
    replicas = {stage: list(workers.values()).count(stage) for stage in seconds}
    made = []
    for tick in range(1, 30):
        now = tick * 0.25
        for worker, stage in workers.items():  # 100 items/s through; each call takes twice
            items = int(100 * now / replicas[stage])  # its CPU time: it waits for a core
            cpu = items * seconds[stage]
            core.handle(Measured(worker, Counters(items_in=items, busy_s=2 * cpu, cpu_s=cpu,
                                                  queued_s=cpu), now))
        made.append(adapter.observe(core, now))
    assert not any(made), adapter.refits


def spin(seconds: float) -> None:
    """Keep this thread's CPU busy for ``seconds`` of its own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@unit
def prepare(row: dict[str, float]) -> dict[str, float]:
    spin(0.001)
    return row


@unit
def score(row: dict[str, float]) -> float:
    spin(row["cost"])
    return row["cost"]


def test_a_real_run_of_rows_costlier_than_the_profiled_ones_is_re_fitted_with_its_reason(
        ) -> None:
    # Profiled on cheap rows, `score` looks lighter than `prepare`: the plan gives `prepare`
    # the replicas.  The run's rows cost `score` 15x as much CPU: the adapter must notice
    # (rate and CPU per item both beyond the plan's range), re-solve at what it measured,
    # and say so in the record, whether the new layout runs or not.
    pipeline = Pipeline(prepare, score, name="costlier")
    two = Fleet.parse({"name": "two", "node_types": [
        {"name": "two", "count": 1, "cores": 2, "memory": "8GiB"}]})
    profiled = fitwork.profile_pipeline(pipeline, [{"cost": 0.0002}] * 24, samples=24)
    plan = plan_for(profiled, two, fuse=False)
    before = plan.placement().counts()
    with fitwork.run(pipeline, [{"cost": 0.003}] * 2400, placement=plan,
                     adapt=True) as adapting:
        assert len(list(adapting)) == 2400
    record = adapting.record
    print(f"planned {before}; re-fits: {[r.model_dump() for r in record.refits]}")
    assert record.refits, "a unit 15x costlier than profiled should have been re-fitted"
    first = record.refits[0]
    # every unit beyond the range is named, the furthest off first
    assert first.reason.startswith("unit 'score'") and "ms of CPU per item" in first.reason
    assert first.before == {name: count for name, count in before.items() if count}
    if first.after == first.before:  # kept: the record says why
        assert "kept:" in first.reason
    else:  # applied: `score` is given replicas, and the run resized to them
        assert first.after["score"] > first.before["score"]
        assert first.predicted_after > first.predicted_before
        assert max(record.replicas.counts["score"]) == first.after["score"]


@unit
def fetch_row(row: dict[str, float]) -> dict[str, float]:
    time.sleep(row["wait"])
    return row


@unit
def crunch(row: dict[str, float]) -> float:
    spin(0.002)
    return row["wait"]


def test_a_fused_plan_is_re_fitted_as_the_one_unit_it_runs() -> None:
    # Profiled on rows that barely wait, the plan runs the two stages fused.  The run's rows
    # wait far longer: each fused replica carries far fewer items/s than planned while the
    # cores idle, so the adapter re-solves the fused unit at what it measured and runs more
    # replicas of it, and says why.
    pipeline = Pipeline(fetch_row, crunch, name="waiting")
    two = Fleet.parse({"name": "two", "node_types": [
        {"name": "two", "count": 1, "cores": 2, "memory": "8GiB"}]})
    profiled = fitwork.profile_pipeline(pipeline, [{"wait": 0.002}] * 24, samples=24)
    plan = plan_for(profiled, two)
    assert plan.fused, plan.tie  # light stages: the plan runs them as one unit
    before = plan.placement().counts()
    # The wait is set by the calls the plan runs at once, so the planned layout carries at
    # most 50 items/s (a fifth of what two cores do at 2 ms each) however many threads a
    # slower host's profile gives it (one read 1 replica x 2, another 3 x 11 or more).
    calls = sum(g.replicas * (g.io or 1) for g in plan.placement().groups)
    wait = max(0.03, calls / 50)
    fed = 0

    def rows() -> Iterator[dict[str, float]]:
        nonlocal fed
        deadline = time.monotonic() + 8.0
        while time.monotonic() < deadline:  # long enough for a window and a re-fit
            fed += 1
            yield {"wait": wait}

    with fitwork.run(pipeline, rows(), placement=plan, adapt=True) as adapting:
        assert len(list(adapting)) == fed
    record = adapting.record
    print(f"planned {before}, {calls} calls at once, rows wait {wait:.3f} s; "
          f"re-fits: {[r.model_dump() for r in record.refits]}")
    assert record.refits, "a fused unit far slower per replica should have been re-fitted"
    first = record.refits[0]
    assert first.reason.startswith("unit 'monolithic' runs at"), first.reason
    assert first.before == before
    assert first.after["monolithic"] > first.before["monolithic"], first.reason
    assert first.predicted_after > first.predicted_before
    assert max(record.replicas.counts["monolithic"]) >= first.after["monolithic"]


def test_a_replica_kept_full_is_busy_as_it_goes_not_only_once_it_idles() -> None:
    """An ``io`` replica whose calls overlap without a gap closes no busy interval while it
    runs: its busy seconds must still grow, or the adapter reads its items over no time."""
    from fitwork.engine.serve import Busy

    now = [0.0]
    busy = Busy(clock=lambda: now[0])
    busy.begin()
    now[0] = 1.0
    busy.begin()  # a second call overlaps the first
    busy.end()
    now[0] = 2.5
    assert busy.seconds == 0.0 and busy.so_far() == pytest.approx(2.5)  # none closed yet
    busy.end()
    now[0] = 4.0
    assert busy.seconds == pytest.approx(2.5) and busy.so_far() == pytest.approx(2.5)
    assert busy.take() == [(0.0, 2.5)]


class QuietHost:
    """The host as a replanner reads it, with nothing but the run on it: its busy CPU
    seconds are the workers' (the core's books) and the clock is the test's."""

    def __init__(self, core: object, cores: int) -> None:
        self.core, self.cores, self.now = core, cores, 0.0

    def __call__(self) -> tuple[float, float, float, int]:
        return (self.now, sum(self.core.stage_cpu), 0.0, self.cores)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("max_frames", "held"), [(0, False), (64, True), (64, False)],
                         ids=["no-room", "no-credit", "source-free"])
def test_a_plan_made_on_a_busy_host_grows_its_replicas_once_the_host_is_free(
        max_frames: int, held: bool) -> None:
    """Issue 37: the profile saw others hold 90% of the cores (ceiling 0.1), so the plan
    runs one replica a unit; at run time others hold none, the source waits on the
    pipeline, and the re-fit must grow the replicas, not only keep them.  The source
    waits where the core has no room, or where the engine had no credit for the driver's
    last feed (``held``: a local run's channel fills long before the core's frames run
    out); a source not held back is not waiting, and nothing grows."""
    from fitwork.engine.core import Measured, Policy, Resize, RunCore, Spawn
    from fitwork.engine.core.events import Counters
    from fitwork.engine.shell import stages_of
    from fitwork.fit.replan import PlanReplanner

    two = Fleet.parse({"name": "two", "node_types": [
        {"name": "two", "count": 1, "cores": 2, "memory": "8GiB"}]})
    units = []
    for u in profile(0.004).units:
        batch = BatchMeasurement(batch_size=1, items=32, wall_s=u.wall_s, cpu_s=u.cpu_s,
                                 others_share=0.9, others_readings=[0.9] * 8)
        units.append(u.model_copy(update={"reserve": False, "batches": [batch]}))
    busy = profile(0.004).model_copy(update={"units": units})
    plan = plan_for(busy, two, fuse=False)
    assert plan.core_ceiling == pytest.approx(0.1)
    placement = plan.placement()
    planned = placement.counts()
    core = RunCore(stages_of(PIPELINE, placement), placement, Policy(max_frames=max_frames),
                   "r", 0.0)
    workers = {s.worker: s.stage for s in core.start() if isinstance(s, Spawn)}
    replanner = PlanReplanner(plan, placement)
    host = QuietHost(core, 2)
    replanner.host_reading = host  # type: ignore[method-assign]
    # (no completions are booked here: the shortfall rule is left out, the grow rule tested)
    adapter = Adapter(replanner, PIPELINE.units,
                      AdaptPolicy(window=1.0, interval=1.0, shortfall=0.0))
    rates, cpu = replanner.planned_rates(), replanner.planned_cpu()
    done = {worker: (0.0, 0.0) for worker in workers}
    grown = None
    for tick in range(1, 40):
        now = host.now = tick * 0.25
        for worker, stage in list(workers.items()):  # each replica busy all the time, at
            name = core.names[stage]  # the rate and CPU per item the plan assumed
            items = done[worker][0] + 0.25 * rates[name]
            done[worker] = (items, done[worker][1] + 0.25)
            core.handle(Measured(worker, Counters(items_in=int(items), busy_s=done[worker][1],
                                                  cpu_s=int(items) * cpu[name]), now))
        proposal = adapter.observe(core, now, held=held)
        if proposal:
            grown = grown or proposal
            for stage, name in enumerate(core.names):
                for spawn in core.handle(Resize(stage, proposal[name], now)):
                    if isinstance(spawn, Spawn):
                        workers[spawn.worker] = spawn.stage
                        done[spawn.worker] = (0.0, 0.0)
    if max_frames and not held:  # room and a credit to spare: the source is not waiting
        assert grown is None and not adapter.refits, adapter.refits
        return
    assert grown is not None, adapter.refits
    first = adapter.refits[0]
    assert "others left 100% of the host's cores" in first.reason
    assert "the plan counted on 10%" in first.reason
    assert grown["work"] > planned["work"] and first.predicted_after > first.predicted_before
    assert replanner.ceiling() == pytest.approx(1.0)


def test_a_real_run_planned_at_a_low_ceiling_reads_the_host_and_grows_where_it_is_free(
        ) -> None:
    """The same on a real run: the plan counts on 10% of two cores (its profile's readings
    said others held 90%), the run reads the host as it goes.  Where the host left more
    than the plan counted on (a quiet host), the re-fit grows the replicas; where it was
    as busy as profiled, any re-fit says what it read, and nothing grows for cores no one
    left free."""
    pipeline = Pipeline(prepare, score, name="freed")
    two = Fleet.parse({"name": "two", "node_types": [
        {"name": "two", "count": 1, "cores": 2, "memory": "8GiB"}]})
    rows = [{"cost": 0.003}] * 24
    profiled = fitwork.profile_pipeline(pipeline, rows, samples=24)
    units = [u.model_copy(update={"batches": [b.model_copy(update={
        "others_share": 0.9, "others_readings": [0.9] * 4}) for b in u.batches]})
        for u in profiled.units]
    # the readings of how much 1-8 processes (or spinners) get are the quiet host's:
    # dropped, as a profile that read others holding 90% would not have them
    plan = plan_for(profiled.model_copy(update={"units": units, "share_readings": {},
                                                "yield_readings": {}}), two, fuse=False)
    assert plan.core_ceiling == pytest.approx(0.1)
    before = plan.placement().counts()
    load0 = os.getloadavg()[0]
    with fitwork.run(pipeline, [{"cost": 0.003}] * 3000, placement=plan,
                     adapt=True) as adapting:
        assert len(list(adapting)) == 3000
    record, load = adapting.record, (load0 + os.getloadavg()[0]) / 2
    print(f"load average {load:.1f} on {os.cpu_count()} cores; planned {before}; "
          f"re-fits: {[(r.reason, r.after) for r in record.refits]}")
    said = re.compile(r"others left (\d+)% of the host's cores over the last")
    grew = [r for r in record.refits if any(r.after.get(n, 0) > c for n, c in r.before.items())]
    for refit in record.refits:  # a re-fit for freed cores saw them free
        assert all(int(left) / 100 >= 0.1 + AdaptPolicy().grow - 0.005
                   for left in said.findall(refit.reason))
    if load < 0.5 * (os.cpu_count() or 1):  # a quiet host: the plan must not stay at 10%
        # (a re-fit for a unit off its rate also re-solves at the share read: either grows)
        assert grew and all("others left" in r.reason for r in grew), record.refits
        assert max(record.replicas.counts["score"]) > before["score"]
