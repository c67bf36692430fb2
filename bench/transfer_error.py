"""Transfer error of the cost model: splitwise A100<->H100 per phase, Gavel per direction."""

from __future__ import annotations

import argparse
from itertools import groupby

from fitwork.fit.calibration import SPLITS, CheckRow, calibration, transfer_table

AIM = 0.20


def _print_rows(rows: list[CheckRow]) -> None:
    print(f"  {'transfer':<40} {'n':>4} {'median':>8} {'p90':>8} {'worst':>8} {'pred/meas':>10}")
    for r in rows:
        print(f"  {r.kind:<40} {r.n:>4} {r.median:>8.1%} {r.p90:>8.1%} {r.worst:>8.1%} "
              f"{r.bias:>10.2f}")


def main() -> None:
    """Print the table: errors of the predicted rate, |predicted - measured| / measured."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--splits", default=",".join(SPLITS),
                        help="comma-separated splits to print (default: all)")
    args = parser.parse_args()
    wanted = args.splits.split(",")
    table = transfer_table()
    print("Relative error of the predicted RATE, |predicted - measured| / measured; pred/meas "
          "is the median predicted / measured rate (1.00 = unbiased).")
    for (data, split), rows in groupby(table, key=lambda r: (r.data, r.split)):
        if split not in wanted:
            continue
        print(f"\n{data}, {split}: {SPLITS[split]}")
        _print_rows(list(rows))
    print("\nEfficiencies (achieved / roofline) the cost model applies:")
    for e in calibration().efficiencies.values():
        print(f"  {e.device_class:<10} {e.bound:<8} {e.value:.3f}  ({e.n} steps)")
    for name, f in calibration().factors.items():
        print(f"  {name:<10} gavel    {f.value:.3f}  (rate per FP32 peak, relative to V100)")
    held = [r for r in table if r.split == "held-out"]
    worst = max(held, key=lambda r: r.median)
    verdict = "met" if worst.median <= AIM else "MISSED"
    print(f"\nAim: median <= {AIM:.0%} on held-out A100<->H100 transfers: {verdict} "
          f"(largest median {worst.median:.1%}, {worst.kind}).")


if __name__ == "__main__":
    main()
