"""Accelerator timers: the declared clock, precedence, registration."""

from __future__ import annotations

import pytest

from fitwork import Pipeline, unit
from fitwork.profiling import profile_pipeline, timers
from fitwork.profiling.timers import (
    TIMERS,
    DeclaredTimer,
    Timers,
    accelerator_clock,
    declared_timer,
    register_timer,
)

STATS = {"device_s": 0.0}


@unit(gpu=1)
@accelerator_clock(lambda: STATS["device_s"])
def embed(x: int) -> int:
    STATS["device_s"] += 0.001 * (x + 1)
    return x


class Fixed:
    """A timer that always says the same thing."""

    def __init__(self, source: str, seconds: float | None, memory: int | None = None) -> None:
        self.source, self.seconds, self.memory = source, seconds, memory
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def stop(self) -> float | None:
        self.calls.append("stop")
        return self.seconds

    def peak_memory(self) -> int | None:
        return self.memory

    def close(self) -> None:
        self.calls.append("close")


def test_a_function_declares_its_clock_under_unit() -> None:
    clock = declared_timer(embed.fn)
    assert isinstance(clock, DeclaredTimer)
    clock.start()
    embed(4)
    assert clock.stop() == pytest.approx(0.005)
    assert declared_timer(lambda x: x) is None
    also = accelerator_clock(lambda: 1.0)(unit(lambda x: x, name="later"))
    assert declared_timer(also.fn) is not None


def test_the_first_timer_that_measures_wins_and_all_are_stopped() -> None:
    silent, second, third = Fixed("a", None), Fixed("b", 0.25, 1 << 20), Fixed("c", 0.5, 7)
    group = Timers(None, [lambda _: silent, lambda _: None, lambda _: second,
                          lambda _: third])
    group.start()
    assert group.stop() == (0.25, "b")
    assert group.peak_memory() == (1 << 20, "b")
    group.close()
    assert silent.calls == third.calls == ["start", "stop", "close"]
    assert Timers(None, []).stop() == (None, None)


def test_registered_timers_are_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timers, "TIMERS", list(TIMERS))
    fixed = Fixed("mine", 0.125, 3 << 30)

    def mine(replica: object) -> Fixed:
        return fixed

    register_timer(mine, first=True)
    assert timers.TIMERS[0] is mine
    register_timer(mine)
    assert timers.TIMERS[-1] is mine and timers.TIMERS.count(mine) == 1
    profile = profile_pipeline(Pipeline(embed), range(4), samples=4, host_class="cpu-x86",
                               accelerator_class="T4")
    [measured] = profile.units
    assert measured.device_class == "T4"
    assert (measured.accel_s, measured.accel_source) == (pytest.approx(0.0025), "declared")
    assert (measured.device_memory, measured.device_memory_source) == (3 << 30, "measured")
