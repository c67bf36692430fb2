"""A unit whose first calls cost more (a kernel compiled per input shape) is profiled at its
calls once warm, the rest charged once per replica; a unit that caches each input's answer
is not read as warming up."""

from __future__ import annotations

import pytest

from fitwork import Pipeline, unit
from fitwork.profiling import profile_pipeline
from fitwork.profiling.batch_timing import warm_up

from .spinning import spin

SHAPES = 24
COMPILE_S = 0.02
CALL_S = 0.002



class Kernels:
    """Compiles a kernel per input shape (20 ms of CPU, once each of 24), then 2 ms a call."""

    def __init__(self) -> None:
        self.compiled: set[int] = set()

    def __call__(self, n: int) -> int:
        if n % SHAPES not in self.compiled:
            spin(COMPILE_S)
            self.compiled.add(n % SHAPES)
        spin(CALL_S)
        return n


class Answers:
    """Caches each input's answer: slow on every new input, fast on one seen before."""

    def __init__(self) -> None:
        self.known: dict[int, int] = {}

    def __call__(self, n: int) -> int:
        if n not in self.known:
            spin(3 * CALL_S)
            self.known[n] = n
        return self.known[n]


def test_a_unit_that_warms_up_is_timed_warm_and_charged_its_warm_up_once() -> None:
    profile = profile_pipeline(Pipeline(unit(name="kernels")(Kernels)), range(48),
                               samples=48, loaded=False)
    kernels = profile.units[0]
    timed = kernels.batches[-1]
    print(f"{kernels.cpu_s * 1e3:.2f} ms an item, warm-up {timed.warmup_cpu_s}, "
          f"build {kernels.build_cpu_s}")
    # once warm, 2 ms a call; over the 48 first calls alone it would read 4.5 ms
    assert kernels.cpu_s == pytest.approx(CALL_S, rel=0.35)
    assert timed.warmup_cpu_s is not None
    # the shapes the first call did not compile (it is the build's): 23 x 20 ms
    assert timed.warmup_cpu_s == pytest.approx((SHAPES - 1) * COMPILE_S, rel=0.4)
    assert kernels.build_cpu_s is not None and kernels.build_cpu_s >= timed.warmup_cpu_s


def test_a_unit_that_caches_each_answer_does_not_read_as_warming_up() -> None:
    profile = profile_pipeline(Pipeline(unit(name="answers")(Answers)), range(48),
                               samples=48, loaded=False)
    answers = profile.units[0]
    assert answers.batches[-1].warmup_cpu_s is None


def test_the_rule_reads_the_order_of_the_calls() -> None:
    steady = [(True, 0.002, 0.002)] * 32 + [(False, 0.002, 0.002)] * 16
    assert warm_up(steady) is None
    warming = [(True, 0.02, 0.02)] * 16 + [(True, 0.002, 0.002)] * 16 + \
        [(False, 0.002, 0.002)] * 16
    assert warm_up(warming) == pytest.approx((0.002, 0.002))
    caching = [(True, 0.006, 0.006)] * 32 + [(False, 0.0001, 0.0001)] * 16
    assert warm_up(caching) is None  # new inputs late are as slow as early
    few = [(True, 0.02, 0.02)] * 16 + [(True, 0.002, 0.002)] * 16 + \
        [(False, 0.002, 0.002)] * 4
    assert warm_up(few) is None  # too few calls on samples seen before to judge
