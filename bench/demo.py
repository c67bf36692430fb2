"""The OCR demo at its default size: fitted against monolithic, and realized against predicted."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fitwork.demo import DemoConfig, run_demo
from fitwork.demo.config import DEFAULT_IMAGES, DEFAULT_LATENCY_MS

REALIZED_AIM = 0.8


def main() -> int:
    """Run the demo once and print its figures beside the aims; 1 if a check fails."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=DEFAULT_IMAGES)
    parser.add_argument("--latency-ms", type=float, default=DEFAULT_LATENCY_MS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("out/bench-demo"))
    args = parser.parse_args()
    load = os.getloadavg()[0]
    result = run_demo(DemoConfig(images=args.images, latency_ms=args.latency_ms,
                                 seed=args.seed, out=args.out))
    mono, fitted = result.monolithic, result.fitted
    busiest = result.busiest_class
    mono_busy = mono.figures.of(busiest).utilization
    fitted_busy = fitted.figures.of(busiest).utilization
    speedup = fitted.record.throughput / mono.record.throughput
    print(f"OCR of {result.pages} pages, store latency {args.latency_ms:g} ms, "
          f"{result.host_cores:g} cores, load average {load:.2f} at the start")
    print(f"layout {result.layout}: fitted {fitted.replicas}; monolithic {mono.replicas}")
    for side in (mono, fitted):
        print(f"  {side.label:<10} {side.record.throughput:7.2f} items/s realized, "
              f"{side.predicted:7.2f} predicted ({side.realized_share:.2f}x); "
              f"{busiest} fleet utilization {side.figures.of(busiest).utilization:6.1%} "
              f"of {side.figures.of(busiest).allocated:g} allocated, "
              f"{side.host_cpu_share:6.1%} of the host's cores busy; "
              f"lines exact {side.score.line_accuracy:.1%}")
    print(f"fitted / monolithic throughput: {speedup:.2f}x "
          f"({'aim met' if speedup > 1 else 'aim missed'}: > 1)")
    print(f"{busiest} utilization, fitted vs monolithic: {fitted_busy:.1%} vs {mono_busy:.1%} "
          f"({'aim met' if fitted_busy > mono_busy else 'aim missed'}: higher)")
    print(f"fitted realized / predicted: {fitted.realized_share:.2f} "
          f"({'aim met' if fitted.realized_share >= REALIZED_AIM else 'aim missed'}: "
          f">= {REALIZED_AIM})")
    print(f"same text both ways: {result.same_text}; demo wall {result.wall_s:.1f} s; "
          f"files in {args.out}")
    for failure in result.failures:
        print(f"check failed: {failure}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
