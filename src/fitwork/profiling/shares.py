"""How much of the host k runnable processes get at once: what a plan's core ceiling grows with.

The run-queue wait and the readings of the cores others left (`fitwork.profiling.record`)
are taken by one process: they say what ONE runnable process gets beside the host's other
work.  A plan's replicas are several.  Linux shares a contended core among the runnable
threads of a scheduling group fairly, so beside one other process spinning on a 2-core host
one process gets 1 core, four get 1.6 and eight 1.8; beside other sessions' work, with the
kernel's autogroups on (each session one group, the groups shared among fairly), more
processes of this session get little more.  Which holds, and how much, is read here rather
than assumed: ``k`` processes forked from the profiler work together for a window, each
reports its CPU over its wall time, and their sum over the cores is the share of the host
``k`` such processes got, for ``k`` in `counts`, `ROUNDS` times over, interleaved, so
a moment of other load lowers one reading of each count, not all of one.  The ``k`` start
their window together, once all are forked: forking a large profiler (the demo's, with its
ONNX models loaded) takes milliseconds a process, and probes that began as they were
forked ran alone for part of a 0.15 s window, so eight of them beside a spinning loop in
another session read 0.78-0.88 of the host where they got 0.49-0.56 started together
(and the demo's plan, at 0.88, realized half its prediction: issue 37).  A plan of ``n``
busy threads is then planned at what ``n`` got (`fitwork.fit.ceiling.share_ceiling`).

Each probe process works as a replica of the pipeline does: it spins until it has had
``duty`` x `PERIOD_S` of CPU, then sleeps (1 - ``duty``) x `PERIOD_S`, over and over, with
``duty`` the profiled pipeline's CPU over its wall time less its run-queue wait
(`pipeline_duty`).  Pure spinners misread it for replicas that wait on I/O: on this
repository's 2-core host at load 20, eight spinners got half the host where eight OCR
monoliths waiting 60 ms a page got 5%, and a plan at the spinners' share realized 0.25 of
its prediction (likely the autogroups again: a session's weight on a core follows its
runnable load there, which sleepers keep low; not checked further).  Where the host's
other processes used under `QUIET` of it during the first reading (one process), the host
is taken as free and that reading is the only one: a plan there may use every core
whatever its count, and profiles (the test suite's many) stay as quick as before.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

from fitwork.profiling.record import host_busy_seconds

WINDOW_S = 0.15
"""Seconds each probe process spins for, in each reading (15 of the kernel's ticks)."""
ROUNDS = 3
"""Readings of every count, interleaved."""
MOST_PROCESSES = 16
"""The most processes one reading starts."""
JOIN_S = 10.0
"""The most seconds a reading waits for its processes to report."""
PERIOD_S = 0.02
"""One probe process's cycle of work and sleep (`duty` of it working)."""
QUIET = 0.05
"""The share of the host other processes may use during the first reading for the host to
count as free (no further readings)."""
GRANTED = 0.8
"""A reading that got this share of what its processes asked was not held back by the host
(`yield_readings`)."""


def counts(cores: int) -> tuple[int, ...]:
    """The process counts read: one, one per core, two and four per core (at most
    `MOST_PROCESSES`).

    Reading work that waits at many more processes (up to 64 on 2 cores, where 64 probes
    got the whole host) planned layouts of 3-14 processes x 32-64 threads that realized
    1.8-19x under their prediction: a plan's threads do not claim what as many spinning
    probes do (issue 37, bench figures in `bench/README.md`), so the counts stay these."""
    return tuple(sorted({min(k, MOST_PROCESSES) for k in (1, cores, 2 * cores, 4 * cores)}))


def _work(seconds: float, duty: float, go: Event, conn: Connection) -> None:
    """Once ``go`` is set, for ``seconds``: spin until ``duty`` x `PERIOD_S` of CPU is had,
    sleep the rest of the period; send back the CPU and wall seconds this process spent."""
    if not go.wait(JOIN_S):
        conn.close()
        return
    cpu0, wall0 = time.process_time(), time.perf_counter()
    end = wall0 + seconds
    while time.perf_counter() < end:
        had = time.process_time() + duty * PERIOD_S
        while time.process_time() < had:
            pass
        if duty < 1.0:
            time.sleep((1.0 - duty) * PERIOD_S)
    conn.send((time.process_time() - cpu0, time.perf_counter() - wall0))
    conn.close()


def share_of(k: int, cores: int, seconds: float = WINDOW_S,
             duty: float = 1.0) -> tuple[float, float] | None:
    """The share of ``cores`` that ``k`` processes working ``duty`` of the time at once got
    (each one's CPU over its own wall time, summed), and the share other processes used
    meanwhile (1.0 where the platform does not say); ``None`` where a process did not
    report."""
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    pipes, procs = [], []
    for _ in range(k):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_work, args=(seconds, duty, go, send), daemon=True)
        proc.start()
        send.close()
        pipes.append(recv)
        procs.append(proc)
    got = spent = 0.0
    host0, wall0 = host_busy_seconds(), time.perf_counter()
    go.set()  # all at once: a process forked late must not leave the early ones alone
    try:
        for recv in pipes:
            if not recv.poll(JOIN_S):
                return None
            cpu, wall = recv.recv()
            got += cpu / wall if wall > 0 else 0.0
            spent += cpu
    except (EOFError, OSError):
        return None
    finally:
        for proc in procs:
            proc.join(JOIN_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
    host, wall = host_busy_seconds(), time.perf_counter() - wall0
    others = 1.0 if host is None or host0 is None or wall <= 0 else \
        max(0.0, host - host0 - spent) / wall / max(cores, 1)
    return min(1.0, got / max(cores, 1)), min(1.0, others)


def host_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


def pipeline_duty(cpu_wall_queued: list[tuple[float, float, float]]) -> float:
    """The share of its time a replica running every stage in turn works the CPU, from each
    stage's (CPU, wall, run-queue) seconds per source item: CPU over wall less the wait
    for a core (at least 0.05, at most 1)."""
    cpu = sum(c for c, _, _ in cpu_wall_queued)
    wall = sum(max(c, w - q) for c, w, q in cpu_wall_queued)
    return 1.0 if wall <= 0 else min(1.0, max(0.05, cpu / wall))


def share_readings(cores: int | None = None, rounds: int = ROUNDS,
                   seconds: float = WINDOW_S, duty: float = 1.0) -> dict[int, list[float]]:
    """Every reading of the share of the host's cores ``k`` processes working ``duty`` of
    the time got, by ``k`` (`counts`), ``rounds`` each, interleaved; a count
    no reading came back for is left out, and on a free host (`QUIET`) only the first
    reading is taken."""
    cores = cores or host_cores()
    found: dict[int, list[float]] = {}
    for r in range(rounds):
        for k in counts(cores):
            read = share_of(k, cores, seconds, duty)
            if read is None:
                continue
            found.setdefault(k, []).append(round(read[0], 4))
            if r == 0 and k == 1 and read[1] < QUIET:
                return found
    return found


def asked(k: int, cores: int, duty: float) -> float:
    """The share of ``cores`` that ``k`` processes working ``duty`` of the time ask for."""
    return min(1.0, k * duty / max(cores, 1))


def yield_readings(readings: dict[int, list[float]], duty: float, cores: int | None = None,
                   rounds: int = ROUNDS, seconds: float = WINDOW_S) -> dict[int, list[float]]:
    """Readings of the share of the host ``k`` processes spinning without a pause got, for
    each count whose ``readings`` (at ``duty``) got at least `GRANTED` of what they asked
    (`asked`): those say what work that waits asks, not what the host would give it.

    Which it is decides what threads that mostly wait get beside a busy core.  On this
    repository's 2-core host with one process spinning, a threaded fused plan of
    ``bench/fit_quality.py``'s sleep_io, undeclared or io_service (2 processes x 8-32
    threads, planned at the 51-59% of the host the spinner left) used 1.48-1.66 cores and
    realized 1.08-1.33x its prediction where the spinner was in the plan's own session (it
    kept 0.30-0.46 of a core), and 0.99-1.20 cores, 0.73-1.22x, where the spinner ran in a
    session of its own (it kept its core: the kernel's autogroups share a contended core
    among sessions, then among a session's threads).  Their duty-cycled readings were the
    same in both (8 processes asked 0.16-0.44 of the host and got it), so they cannot tell
    the two apart; spinners can (two get 2 of 3 shares of the cores beside one spinner in
    their session, half the host beside one in another).  Nothing is read where the
    readings were short of what they asked (the host gave that work less than it wanted,
    which the readings already say) or where they were taken spinning."""
    if duty >= 1.0 or len(readings) < 2:
        return {}
    cores = cores or host_cores()
    short = {k for k, got in readings.items()
             if not got or sorted(got)[len(got) // 2] < GRANTED * asked(k, cores, duty)}
    found: dict[int, list[float]] = {}
    for _ in range(rounds):
        for k in sorted(set(readings) - short):
            read = share_of(k, cores, seconds, 1.0)
            if read is not None:
                found.setdefault(k, []).append(round(read[0], 4))
    return found


__all__ = ["GRANTED", "asked", "counts", "host_cores", "pipeline_duty", "share_of",
           "share_readings", "yield_readings"]
