"""Soak: a long local run with a slow reader and periodic worker kills stays flat in memory."""

from __future__ import annotations

import argparse
import os
import signal
import time

import fitwork
from fitwork import Pipeline, unit
from fitwork.telemetry.record import ProcessSample

MIB = 1 << 20


@unit(cpu=0.5)
def parse(x: int) -> int:
    """Stands for decoding a record."""
    return x * 3 + 1


@unit(cpu=0.5)
def widen(x: int) -> dict[str, object]:
    """Stands for enriching it: a few hundred bytes per output."""
    return {"id": x, "tags": [x % 7, x % 11, x % 13], "text": f"record {x:>12}"}


def quarter_peaks(samples: list[ProcessSample], field: str) -> list[float]:
    """The largest value of ``field`` in each quarter of the run (the last sample, taken
    after the release, left out)."""
    body = samples[:-1]
    size = max(1, len(body) // 4)
    return [max(getattr(s, field) for s in body[i:i + size]) for i in range(0, size * 4, size)
            if body[i:i + size]]


def main() -> None:
    """Run the soak and print the figures over time, each against the run's first quarter."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--kill-every", type=int, default=100_000,
                        help="outputs between kills of a worker")
    parser.add_argument("--pause-every", type=int, default=50_000,
                        help="outputs between 0.5 s pauses of the reader (a slow sink)")
    args = parser.parse_args()
    pipeline = Pipeline(parse, widen, name="soak")
    kills = 0
    marks: list[tuple[float, int]] = [(0.0, 0)]  # (seconds, outputs read) at each pause
    start = time.perf_counter()
    with fitwork.run(pipeline, range(args.items), workers={"parse": 2, "widen": 2}) as result:
        for n, _ in enumerate(result, 1):
            if n % args.pause_every == 0:
                marks.append((time.perf_counter() - start, n))
                time.sleep(0.5)
            if n % args.kill_every == 0:
                pids = result.worker_pids("widen")
                if pids:
                    os.kill(pids[kills % len(pids)], signal.SIGKILL)
                    kills += 1
    wall = time.perf_counter() - start
    record = result.record
    samples = sorted(record.process_samples, key=lambda s: s.t_s)
    print(f"soak: {args.items:,} items in {wall:.1f} s ({args.items / wall:,.0f} items/s), "
          f"{kills} worker kills, {record.worker_restarts} replacements, "
          f"{len(samples)} samples")
    print(f"{'t s':>7} {'driver MiB':>10} {'fds':>4} {'thr':>4} {'workers':>7} "
          f"{'worker max MiB':>14} {'worker fds':>10} {'shm MiB':>8}")
    for s in samples[::max(1, len(samples) // 16)] + samples[-1:]:
        print(f"{s.t_s:7.1f} {s.driver_rss / MIB:10.1f} {s.driver_fds:4d} "
              f"{s.driver_threads:4d} {s.workers:7d} {s.worker_rss_max / MIB:14.1f} "
              f"{s.worker_fds:10d} {s.shm_bytes / MIB:8.1f}")
    for field, name in (("driver_rss", "driver RSS"), ("driver_fds", "driver open files"),
                        ("worker_fds", "workers' open files"),
                        ("shm_bytes", "/dev/shm bytes")):
        peaks = quarter_peaks(samples, field)
        if peaks and peaks[0]:
            print(f"{name}: peak per quarter {', '.join(f'{p:,.0f}' for p in peaks)}; last "
                  f"quarter / first {peaks[-1] / peaks[0]:.2f}x (aim: about 1x)")
    quarter = max(1, (len(marks) - 1) // 4)
    rates = [(marks[i + quarter][1] - marks[i][1]) / (marks[i + quarter][0] - marks[i][0])
             for i in range(0, len(marks) - quarter, quarter)][:4]
    if rates:
        print(f"throughput per quarter (outputs/s, the reader's pauses included): "
              f"{', '.join(f'{r:,.0f}' for r in rates)}; last / first "
              f"{rates[-1] / rates[0]:.2f}x (aim: about 1x)")
    final = samples[-1]
    print(f"after the run: {final.workers} workers, {final.shm_bytes} bytes in /dev/shm "
          f"(aim: 0 and 0)")


if __name__ == "__main__":
    main()
