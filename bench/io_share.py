"""The share of a contended core that sleep-heavy threads get beside a CPU hog.

Issue 37: threaded I/O plans ran 1.25-1.45x slower than predicted while one core was kept
busy.  This measures what such threads meet: one process of ``T`` threads, each item a
sleep of ``w`` (the I/O wait) then ``c`` of CPU (thread CPU time, spun), pinned to one core,
alone on it and beside a process spinning on the same core (the hog), alternately.  Per
item it times the CPU part's wall (from the sleep's return to the end of the spin) and the
wake-up delay (the sleep's return past ``w``).  The share of the core the threads got while
they ran is ``c / CPU part's wall``; the item's wall inflation, loaded over alone.

    .venv/bin/python bench/io_share.py [--seconds 1.5] [--rounds 2]

Other processes on the host use the same core too (the figure is what this host gave at the
time, with the load average printed beside it).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import threading
import time
from dataclasses import dataclass

CORE = 0


def _spin_cpu(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _hog(stop: multiprocessing.synchronize.Event) -> None:
    os.sched_setaffinity(0, {CORE})
    x = 0
    while not stop.is_set():
        for _ in range(50_000):
            x += 1


@dataclass
class Reading:
    """Medians over the items of one run."""

    item_wall: float
    cpu_wall: float
    wake_delay: float
    share: float


def _worker(threads: int, wait: float, cpu: float, seconds: float,
            out: multiprocessing.queues.Queue) -> None:  # type: ignore[type-arg]
    os.sched_setaffinity(0, {CORE})
    rows: list[tuple[float, float, float]] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def loop() -> None:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            time.sleep(wait)
            woke = time.perf_counter()
            _spin_cpu(cpu)
            end = time.perf_counter()
            with lock:
                rows.append((end - start, end - woke, woke - start - wait))

    pool = [threading.Thread(target=loop) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    out.put(rows)


def measure(threads: int, wait: float, cpu: float, seconds: float, hog: bool) -> Reading:
    """One run of the threads, with or without the hog on their core."""
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    spinner = ctx.Process(target=_hog, args=(stop,), daemon=True) if hog else None
    if spinner is not None:
        spinner.start()
        time.sleep(0.2)
    out = ctx.Queue()
    proc = ctx.Process(target=_worker, args=(threads, wait, cpu, seconds, out))
    proc.start()
    rows = out.get(timeout=seconds + 60)
    proc.join()
    if spinner is not None:
        stop.set()
        spinner.join(5)
    item, cpu_wall, wake = (statistics.median(r[i] for r in rows) for i in range(3))
    return Reading(item, cpu_wall, wake, cpu / cpu_wall if cpu_wall > 0 else 0.0)


SETTINGS = [(4, 0.020, 0.0005), (4, 0.020, 0.002), (16, 0.020, 0.0005), (16, 0.005, 0.0005),
            (16, 0.050, 0.002), (4, 0.005, 0.002)]


def main() -> None:
    """Each setting alone and beside the hog, alternately, ``--rounds`` times."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; all on core "
          f"{CORE}; medians per item")
    print(f"{'threads':>7}{'wait ms':>9}{'cpu ms':>8}{'alone: item ms':>16}{'share':>7}"
          f"{'hog: item ms':>14}{'share':>7}{'wake ms':>9}{'item x':>8}")
    for threads, wait, cpu in SETTINGS:
        alone, loaded = [], []
        for _ in range(args.rounds):
            alone.append(measure(threads, wait, cpu, args.seconds, hog=False))
            loaded.append(measure(threads, wait, cpu, args.seconds, hog=True))
        a = Reading(*(statistics.median(getattr(r, f) for r in alone)
                      for f in ("item_wall", "cpu_wall", "wake_delay", "share")))
        b = Reading(*(statistics.median(getattr(r, f) for r in loaded)
                      for f in ("item_wall", "cpu_wall", "wake_delay", "share")))
        print(f"{threads:>7}{wait * 1e3:>9.1f}{cpu * 1e3:>8.1f}{a.item_wall * 1e3:>16.2f}"
              f"{a.share:>7.2f}{b.item_wall * 1e3:>14.2f}{b.share:>7.2f}"
              f"{b.wake_delay * 1e3:>9.2f}{b.item_wall / a.item_wall:>8.2f}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
