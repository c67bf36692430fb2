"""A unit that works the CPU is timed again with a copy of it on every core, and plans use
the CPU per item it spends then; a unit that waits, or costs little, is not."""

from __future__ import annotations

import time

import pytest

import fitwork
from fitwork import Pipeline, unit
from fitwork.fit.plan import plan_for
from fitwork.hardware.discover import usable_cores
from fitwork.profiling import profile_pipeline


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@unit
def crunch(n: int) -> int:
    """2 ms of CPU."""
    _spin(0.002)
    return n


@unit
def wait(n: int) -> int:
    """2 ms asleep."""
    time.sleep(0.002)
    return n


@unit
def tiny(n: int) -> int:
    return n + 1


def test_a_cpu_unit_is_timed_with_a_copy_on_every_core() -> None:
    cores = int(usable_cores())
    if cores < 2:
        pytest.skip("one core: no copies to run at once")
    profile = profile_pipeline(Pipeline(crunch, wait, tiny, name="corun"), range(16),
                               samples=16)
    crunched, waited, small = profile.units
    assert crunched.loaded_copies == cores
    assert crunched.loaded_factor is not None and 1.0 <= crunched.loaded_factor < 3.0
    assert f"with {cores} copies at once" in crunched.conditions
    assert waited.loaded_factor is None and small.loaded_factor is None
    # its CPU per item is its own timing pooled with the copies' four passes alone, later
    assert crunched.pooled_timings == 5 and crunched.pooled_factor is not None
    assert "the mean of 5 timings" in crunched.conditions
    assert 0.002 * 0.9 <= crunched.cpu_s <= 0.002 * 1.5, crunched.cpu_s  # 2 ms of its CPU
    assert waited.pooled_timings is None and small.pooled_timings is None
    alone = profile_pipeline(Pipeline(crunch, name="alone"), range(8), samples=8,
                             loaded=False)
    assert alone.units[0].loaded_factor is None and alone.units[0].pooled_timings is None


def test_a_pooled_timing_scales_every_batch_size_alike() -> None:
    from fitwork.profiling.loaded import with_pooled_cpu
    from fitwork.profiling.record import BatchMeasurement, UnitProfile

    def at(size: int, wall: float, cpu: float) -> BatchMeasurement:
        return BatchMeasurement(batch_size=size, items=8, wall_s=wall, cpu_s=cpu)

    first = UnitProfile(name="u", kind="map", resources={"cpu": 1.0}, device_class="cpu-x86",
                        samples=8, wall_s=0.0011, cpu_s=0.001, bytes_in=8, bytes_out=8,
                        output_ratio=1.0, peak_rss=1, threads=1,
                        batches=[at(1, 0.0025, 0.002), at(8, 0.0011, 0.001)])
    # its own 1.0 ms and three later 1.4 ms: a mean of 1.3 ms, 1.3x the first
    pooled = with_pooled_cpu(first, (0.0014, 0.0014, 0.0014))
    assert pooled.pooled_timings == 4 and pooled.pooled_factor == pytest.approx(1.3)
    assert pooled.cpu_s == pytest.approx(0.0013) and pooled.wall_s == pytest.approx(0.0014)
    assert [b.cpu_s for b in pooled.batches] == pytest.approx([0.0026, 0.0013])
    assert [b.wall_s for b in pooled.batches] == pytest.approx([0.0031, 0.0014])
    # a unit whose pools run several threads keeps its own timing (a copy counts spinning)
    threaded = first.model_copy(update={"threads": 2})
    assert with_pooled_cpu(threaded, (0.0014,)) is threaded
    assert with_pooled_cpu(first, ()) is first


def test_the_fit_plans_from_the_cpu_a_unit_spends_with_copies_beside_it() -> None:
    profile = profile_pipeline(Pipeline(crunch, name="one"), range(16), samples=16,
                               loaded=False)
    fleet = fitwork.discover_local()
    measured = profile.units[0]
    slower = profile.model_copy(update={"units": [
        measured.model_copy(update={"loaded_copies": 2, "loaded_factor": 1.5})]})
    loaded = slower.units[0].loaded()
    assert loaded.cpu_s == pytest.approx(1.5 * measured.cpu_s)
    assert loaded.wall_s == pytest.approx(measured.wall_s + 0.5 * measured.cpu_s)
    assert [b.cpu_s for b in loaded.batches] == pytest.approx(
        [1.5 * b.cpu_s for b in measured.batches])
    # CPU-bound on this host's cores: a third less when each item costs half as much again
    before, after = plan_for(profile, fleet), plan_for(slower, fleet)
    assert after.fitted.throughput == pytest.approx(before.fitted.throughput / 1.5, rel=0.1)
    assert slower.under_load().units[0] == loaded and profile.under_load() is profile


def test_the_factor_counts_only_where_every_pair_read_slower_together() -> None:
    from fitwork.profiling.corun import NOISE, Loaded

    assert Loaded(16, (1.16, 1.21, 1.19)).factor == pytest.approx(1.19)
    # one pair at the host's noise: the others' readings are not evidence enough
    assert Loaded(2, (1.0, 1.25, 1.52)).factor == 1.0
    assert Loaded(2, (NOISE, 1.3, 1.3)).factor == 1.0
    assert Loaded(2, ()).factor == 1.0


class _DiesWhenCopied:
    """Builds in the test's process; a forked copy dies building it (as one killed for its
    memory would)."""

    def __init__(self) -> None:
        import os

        if os.getpid() != _TEST_PID:
            os._exit(9)

    def __call__(self, n: int) -> int:
        _spin(0.002)
        return n


_TEST_PID = __import__("os").getpid()


def test_a_copy_that_dies_building_ends_the_measurement_at_once() -> None:
    from fitwork.profiling.corun import loaded_factor

    dies = unit(_DiesWhenCopied, name="dies")
    start = time.perf_counter()
    assert loaded_factor(dies, list(range(8)), 1, 2, wall_s=0.002) is None
    assert time.perf_counter() - start < 10  # not the copies' build timeout (120 s)


def test_every_copy_ends_on_its_own_when_the_measurement_lets_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy reads EOF once this process closes its end, so none is left to the join's
    timeout and killed (each had been forked holding its own end open, and waited out ten
    windows: 5 to 9 s of every CPU unit's profile)."""
    import multiprocessing.process

    from fitwork.profiling.corun import loaded_factor

    killed: list[int | None] = []
    kill = multiprocessing.process.BaseProcess.kill

    def noting(self: multiprocessing.process.BaseProcess) -> None:
        killed.append(self.pid)
        kill(self)

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "kill", noting)
    found = loaded_factor(crunch, list(range(8)), 1, 3, wall_s=0.002)
    assert found is not None and found.copies == 3 and len(found.ratios) == 3
    assert len(found.alone) == 4  # a pass alone either side of each pass together
    assert killed == []


def test_a_host_slowing_through_the_measurement_is_not_read_as_sharing() -> None:
    """Passes alone and together in turn (A T A T A T A): each together reads against the
    passes alone either side, so a steady drift cancels; against the pass before it only,
    a host slowing 10% a pass read every ratio at about 1.1, over the 1.05 rule."""
    from fitwork.profiling.corun import NOISE, Loaded, bracketed

    drift = [1.0 * 1.1 ** k for k in range(7)]  # a pass's CPU per item, slowing 10% a pass
    alones, togethers = drift[0::2], drift[1::2]
    ratios = bracketed(alones, togethers)
    assert len(ratios) == 3 and all(r == pytest.approx(1.0, abs=0.01) for r in ratios)
    assert Loaded(2, ratios, tuple(alones)).factor == 1.0
    before_only = [t / a for t, a in zip(togethers, alones[:-1], strict=True)]
    assert min(before_only) > NOISE  # what the old order read: a factor of 1.1
    shared = bracketed([1.0, 1.0, 1.0, 1.0], [1.3, 1.25, 1.35])  # sharing's real cost
    assert Loaded(2, shared, (1.0,) * 4).factor == pytest.approx(1.3)
