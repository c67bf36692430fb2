"""Process samples: memory, open files and threads of a run's processes, and its shared memory.

A long run must stay flat: the driver's and each worker's resident memory, the files they
hold open, their threads and the bytes the run keeps in ``/dev/shm``.  `ProcessBook` takes a
`ProcessSample` every ``interval`` seconds from the driver's loop (no thread of its own, so
it reads the engine's worker table safely) and keeps at most `MOST_SAMPLES`: when full it
drops every other sample and doubles its interval, so a run of days keeps a bounded record
of its whole length.  Workers' resident memory includes what a fork shares with the driver
copy-on-write, so a replacement forked late in a run shows the driver's heap too.  It is
also the memory watchdog: a worker of a unit that declares ``memory=`` and holds more than
that of its own (`unique_memory`) is named in `over_memory`, for the engine to stop (its
items are then retried alone and, if they do it again, dead-lettered with the reason).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from fitwork.telemetry.record import ProcessSample

MOST_SAMPLES = 1000


@dataclass(frozen=True)
class Reading:
    """One process at one moment."""

    rss: int
    fds: int
    threads: int


def read(pid: int) -> Reading | None:
    """RSS bytes, open file descriptors and threads of ``pid``; None if it is gone."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            fds = process.num_fds() if hasattr(process, "num_fds") else 0
            return Reading(process.memory_info().rss, fds, process.num_threads())
    except (psutil.Error, OSError):
        return None


def unique_memory(pid: int) -> int | None:
    """Bytes only ``pid`` holds (USS): what stopping it would free.  A worker forked from a
    driver holding a large heap shows that heap in its RSS, shared copy-on-write, so the
    watchdog judges a worker by this instead (about 0.3 ms a read, so only for units that
    declare a limit)."""
    try:
        return int(psutil.Process(pid).memory_full_info().uss)
    except (psutil.Error, OSError, AttributeError):
        return None


def shm_bytes(prefix: str | None, folder: Path = Path("/dev/shm")) -> int:
    """Bytes held by files named ``prefix*`` in ``folder`` (a run's shared memory)."""
    if not prefix or not folder.is_dir():
        return 0
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name.startswith(prefix):
                with contextlib.suppress(OSError):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


@dataclass(frozen=True)
class Worker:
    """A live worker as the engine knows it: its id, unit, pid and declared memory."""

    worker: int
    unit: str
    pid: int
    memory: int  # bytes it may hold resident; 0: no limit declared


class ProcessBook:
    """Samples a run's processes from the driver's loop; see the module docstring."""

    def __init__(self, t0: float, interval: float = 0.5) -> None:
        self.t0 = t0
        self.interval = interval
        self.next = t0
        self.samples: list[ProcessSample] = []
        self.over_memory: list[tuple[Worker, int]] = []

    def due(self, now: float) -> bool:
        """Whether a sample is due at ``now``."""
        return now >= self.next

    def take(self, now: float, workers: Iterable[Worker], prefix: str | None) -> None:
        """Read the driver and ``workers``; note the workers over their declared memory."""
        self.next = now + self.interval
        driver = read(os.getpid()) or Reading(0, 0, 0)
        rss: list[int] = []
        fds = threads = 0
        self.over_memory = []
        for worker in workers:
            reading = read(worker.pid)
            if reading is None:
                continue
            rss.append(reading.rss)
            fds += reading.fds
            threads += reading.threads
            if worker.memory and reading.rss > worker.memory:
                own = unique_memory(worker.pid)
                if own is not None and own > worker.memory:
                    self.over_memory.append((worker, own))
        self.samples.append(ProcessSample(
            t_s=now - self.t0, driver_rss=driver.rss, driver_fds=driver.fds,
            driver_threads=driver.threads, workers=len(rss),
            worker_rss_max=max(rss, default=0), worker_rss_sum=sum(rss), worker_fds=fds,
            worker_threads=threads, shm_bytes=shm_bytes(prefix)))
        if len(self.samples) >= MOST_SAMPLES:
            self.samples = self.samples[::2]
            self.interval *= 2
