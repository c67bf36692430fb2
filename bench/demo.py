"""The OCR demo swept wider: fitted vs the best monolithic and the best hand layout found."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fitwork import Progress
from fitwork_demo import DemoConfig, run_demo
from fitwork_demo.config import AIM_HAND, AIM_MONOLITH
from fitwork_demo.files import diagnosis
from fitwork_demo.run import Quiet, Sweep, monolith_replicas

IMAGES = 48
LATENCIES_MS = (30.0, 150.0)
IO_THREADS = (2, 4, 8)
HAND = ((1, 1, None), (1, 2, None), (2, 2, None), (1, 2, 1), (2, 2, 1), (1, 3, 1))
"""(detect, recognise, recognition batch): the declared batch and batch 1, since the profile
on a CPU host finds batching slower per page."""
CAP_S = 45.0
MIB = 2**20


class Lines(Quiet):
    """Prints one line per finished trial, with the time since the bench started."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def phase(self, text: str) -> None:
        """Print the step."""
        print(f"[{time.monotonic() - self.start:6.1f} s] {text}", flush=True)

    def run_progress(self, label: str, snapshot: Progress) -> None:
        """Nothing per snapshot."""

    def run_finished(self, label: str, outcome: str) -> None:
        """Print the trial's outcome."""
        print(f"[{time.monotonic() - self.start:6.1f} s] {label}: {outcome}", flush=True)


def _mib(value: int | None) -> str:
    return "-" if not value else f"{value / MIB:,.0f} MiB"


def _met(ok: bool | None) -> str:
    return "n/a" if ok is None else "aim met" if ok else "AIM MISSED"


def report(sweep: Sweep) -> None:
    """Print one latency's layouts and the fitted side against the aims."""
    print(f"\nstore latency {sweep.latency_ms:g} ms")
    for c in sweep.contenders:
        trials = " ".join(f"{t.rate:.2f}" for t in c.trials)
        print(f"  {c.layout.title:<24} {c.rate:6.2f} items/s ({trials}); whole run "
              f"{c.items_per_s:6.2f}; cores busy {c.cores_busy:4.2f}, others "
              f"{c.others_cores:4.2f}; peak RSS {_mib(c.peak_rss):>9}, PSS "
              f"{_mib(c.peak_pss):>9}; {c.layout.config}")
    mono, hand, fitted = sweep.best_monolith, sweep.best_hand, sweep.fitted
    aims = sweep.aims()
    print(f"  best monolith: {mono.layout.title} ({mono.layout.config}) {mono.rate:.2f} items/s")
    print(f"  fitted: {fitted.layout.config}: {fitted.rate:.2f} items/s = "
          f"{sweep.over_monolith:.2f}x the best monolith ({_met(aims['over_monolith'])}: "
          f">= {AIM_MONOLITH:g}x)")
    if hand is not None and sweep.over_hand is not None:
        print(f"  best hand: {hand.layout.title} ({hand.layout.config}) {hand.rate:.2f} "
              f"items/s; fitted {sweep.over_hand:.2f}x it ({_met(aims['over_hand'])}: "
              f">= {AIM_HAND:g}x)")
    print(f"  peak memory, fitted vs best monolith: PSS {_mib(fitted.peak_pss)} vs "
          f"{_mib(mono.peak_pss)} ({_met(aims['memory'])}: no more), RSS "
          f"{_mib(fitted.peak_rss)} vs {_mib(mono.peak_rss)} ({_met(aims['memory_rss'])})")
    base = sweep.baseline
    print(f"  predicted: fitted {sweep.plan.fitted.throughput:.2f} items/s, realized "
          f"{fitted.realized_share or 0:.2f} of it; monolithic x{monolith_replicas(sweep.plan)} "
          f"{sweep.plan.monolithic.throughput:.2f}"
          + (f", realized {base.realized_share or 0:.2f} of it" if base else ""))
    found = diagnosis(sweep)
    units = ", ".join(f"{u['unit']} {u['planned_rate_per_replica']:.1f} planned vs "
                      f"{u['measured_rate_per_replica']:.1f} measured"
                      for u in found["units"] if u["unit"] not in ("fetch", "store")
                      and u["planned_rate_per_replica"] and u["measured_rate_per_replica"])
    print(f"  CPU s per page: profile {found['profile_cpu_s_per_page']:.3f} (host bound "
          f"{found['host_bound_items_per_s'] or 0:.1f} items/s), fitted "
          f"{found['fitted_cpu_s_per_page']:.3f}, best monolith "
          f"{found['best_monolith_cpu_s_per_page']:.3f}; others kept "
          f"{found['others_cores_busy']:.2f} cores busy; per busy replica: {units}; "
          f"live re-fits {len(found['refits'])}")


def main() -> int:
    """Run the wider sweep and print each latency's figures beside the aims."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=IMAGES)
    parser.add_argument("--latency-ms", type=float, action="append", dest="latencies")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("out/bench-demo"))
    args = parser.parse_args()
    config = DemoConfig(images=args.images, latencies_ms=tuple(args.latencies or LATENCIES_MS),
                        repeats=args.repeats, io_threads=IO_THREADS, hand=HAND, cap_s=CAP_S,
                        seed=args.seed, out=args.out)
    result = run_demo(config, Lines())
    print(f"\nOCR, {result.pages} pages per trial, {config.repeats} trials per layout "
          f"(alternating), {result.host_cores:g} cores; load average "
          f"{result.load_average[0]:.2f} at the start, {result.load_average[1]:.2f} at the end")
    for sweep in result.sweeps:
        report(sweep)
    print(f"\nsame text in every trial: {result.same_text}; {len(result.trials)} trials; "
          f"wall {result.wall_s:.1f} s; files in {args.out}")
    for failure in result.failures:
        print(f"check failed: {failure}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
