"""How much more CPU a unit spends per item while a copy of it runs on every core.

A unit profiled alone has the host's shared caches, memory bandwidth and single-core clock
to itself.  A run that fills the host shares them among its replicas, so each spends more
CPU per item than the profile measured: on this repository's 2-core development host the
demo's OCR models spent 0.12-0.16 CPU-s per page in runs against 0.106 profiled, and on a
16-core host a BLAS stage 21% more than profiled.  `loaded_factor` measures it: the unit
built once in each of ``copies`` forked processes, which call it on the samples, cycled,
for a window when told: one copy alone, then all ``copies`` together and the one alone
again, `PAIRS` times over.  Each pass together reads the median copy's CPU per item over the
mean of the passes alone either side of it (alone first, then together, read a host that
slowed through the measurement as sharing's cost); the factor is their median where every
ratio read more than `NOISE`, else 1: on a shared 2-core host a single ratio read a 3 ms
numpy unit at 1.00, 1.25 and 1.52 in three profiles, and the runs spent no more than alone.
A unit that mostly waits (CPU under `CPU_SHARE` of its wall time) is not measured: its
copies barely meet.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fitwork.placement import allot
from fitwork.profiling.pools import hold_pools
from fitwork.telemetry.cputime import cpu_seconds
from fitwork.workload.kernel import Kernel
from fitwork.workload.unit import Unit

WINDOW_S = 0.25
"""Seconds each copy calls the unit for, in each pass (longer where four calls take longer,
up to `MOST_WINDOW_S`)."""
PAIRS = 3
"""Passes together, each between two passes alone."""
NOISE = 1.05
"""Every ratio must read more than this for the factor to count."""
MOST_WINDOW_S = 3.0
"""The longest window."""
CPU_SHARE = 0.5
"""A unit whose CPU is under this share of its wall time is not measured (factor 1)."""
MIN_CPU_S = 0.5e-3
"""A unit of less CPU per item is not measured: the engine's own work per item is of its
size, and a window of such calls tells little."""
BUILD_TIMEOUT_S = 120.0
"""The most seconds a copy may take to build the unit and call it once."""


@dataclass(frozen=True)
class Loaded:
    """Each pass's CPU per item with ``copies`` copies at once over the passes alone either
    side of it, and each pass's CPU seconds per item alone (``alone``: the unit timed again,
    later, in a copy built afresh; one more than the ratios)."""

    copies: int
    ratios: tuple[float, ...]
    alone: tuple[float, ...] = ()

    @property
    def factor(self) -> float:
        """The ratios' median where every one read more than `NOISE`, else 1
        (sharing never makes a unit cheaper; a lower reading is the host's noise)."""
        if not self.ratios or min(self.ratios) <= NOISE:
            return 1.0
        return statistics.median(self.ratios)


def worth_measuring(cpu_s: float, wall_s: float) -> bool:
    """Whether a unit of ``cpu_s`` CPU and ``wall_s`` wall seconds per item is measured."""
    return cpu_s >= MIN_CPU_S and cpu_s >= CPU_SHARE * wall_s


def loaded_factor(unit: Unit, inputs: list[Any], batch_size: int, copies: int,
                  wall_s: float, warm: bool = False) -> Loaded | None:
    """`Loaded` for ``unit`` on ``inputs`` at ``batch_size`` (``wall_s`` per item there)
    with ``copies`` copies at once; ``None`` where a copy fails or ``copies`` is under 2.

    The copies are built once, each in its own forked process, and kept for every pass:
    alone, the first copy calls the unit while the others wait; together, all call it.
    With ``warm`` (a unit whose first calls cost more, `batch_timing.warm_up`) each copy
    first takes every sample once, so no pass reads its warm-up."""
    if copies < 2 or not inputs:
        return None
    window = min(MOST_WINDOW_S, max(WINDOW_S, 4 * wall_s * batch_size))
    ctx = multiprocessing.get_context("fork")
    pipes, children = [], []
    for _ in range(copies):
        here, there = ctx.Pipe()
        # each copy is forked holding this end and every earlier copy's: it closes them, or
        # no copy would read EOF when this process lets go (they ended on the join's timeout)
        child = ctx.Process(target=_copy, args=(unit, inputs, batch_size, there,
                                                [*pipes, here], warm), daemon=True)
        child.start()
        there.close()
        pipes.append(here)
        children.append(child)
    try:
        for here in pipes:  # EOF at once where a copy died building
            if not here.poll(BUILD_TIMEOUT_S) or here.recv() != "ready":
                return None
        alones = [_pass(pipes[:1], window)]
        togethers = []
        for _ in range(PAIRS):
            togethers.append(_pass(pipes, window))
            alones.append(_pass(pipes[:1], window))
        alone = [a for a in alones if a]
        together = [t for t in togethers if t is not None]
        if len(alone) < len(alones) or len(together) < len(togethers):
            return None
        return Loaded(copies, bracketed(alone, together), tuple(alone))
    except (EOFError, OSError):
        return None
    finally:
        for here in pipes:
            here.close()  # a waiting copy reads EOF and ends
        for child in children:
            child.join(timeout=window * 10)
            if child.is_alive():
                child.kill()


def bracketed(alones: Sequence[float], togethers: Sequence[float]) -> tuple[float, ...]:
    """Each pass together over the mean of the passes alone either side of it
    (``alones`` one longer than ``togethers``): a host that slows or quickens steadily
    through the measurement moves a pass together and its two neighbours alike."""
    return tuple(t / ((a + b) / 2)
                 for t, a, b in zip(togethers, alones, alones[1:], strict=False))


def _pass(pipes: list[Any], window: float) -> float | None:
    """The median copy's CPU seconds per item over ``window`` seconds, the copies behind
    ``pipes`` calling the unit at once (told within microseconds of each other)."""
    for here in pipes:
        here.send(window)
    figures = [cpu / items for cpu, items in (here.recv() for here in pipes) if items]
    return statistics.median(figures) if len(figures) == len(pipes) else None


def _copy(unit: Unit, inputs: list[Any], batch_size: int, pipe: Any, theirs: list[Any],
          warm: bool = False) -> None:
    """In a forked child: close ``theirs`` (the parent's ends it was forked with), build the
    unit as a replica is built, call it once (on every batch of samples with ``warm``), say
    so; then, for each window it is sent, call it for that many seconds and send back (CPU
    seconds, items), until the pipe closes."""
    for end in theirs:
        end.close()
    hold_pools(allot(unit, None).threads)
    call = Kernel(unit).caller()
    n = len(inputs)
    batches = [[inputs[(i + j) % n] for j in range(batch_size)] for i in range(0, n, batch_size)]
    for batch in batches if warm else batches[:1]:
        with contextlib.suppress(Exception):
            call(batch)
    hold_pools(allot(unit, None).threads)
    pipe.send("ready")
    cycled = itertools.cycle(batches)
    while True:
        try:
            window = pipe.recv()
        except EOFError:
            break
        items, start, cpu0 = 0, time.perf_counter(), cpu_seconds()
        while time.perf_counter() - start < window:
            batch = next(cycled)
            with contextlib.suppress(Exception):
                call(batch)
            items += len(batch)
        pipe.send((cpu_seconds() - cpu0, items))
    pipe.close()
