"""Frame size on the local engine: throughput and the driver's CPU per item at two frame times.

A fused unit of about 3 ms per item gets frames of one or two items at the engines' 5 ms of
work per frame (``FRAME_TIME``), and every frame costs the driver its books and messages
(the fit charges ``DRIVER_SECONDS`` = 140 us a frame).  This runs one layout, fit_quality's
``fanout_filter`` chain fused into 2 processes, with the local engine's frame time at 5 ms
and at 20 ms in alternating rounds, and prints for each the median items/s, the driver's CPU
per item (this process's CPU over the run: the replicas are processes of their
own), and the ratio of the two settings' throughputs.  ``--split`` runs the units split
instead (records x1, featurise x2: a hand layout), where every unit's frames cross.  A
measurement for a decision, not a setting: the engine's frame time is set for the run by
assigning the module's constant.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fit_quality_shapes as fq

import fitwork
from fitwork import Pipeline
from fitwork.engine.local import driver as local_driver
from fitwork.fit.monolithic import FUSED
from fitwork.placement import Group, Placement

SETTINGS = (0.005, 0.02)


def run_once(pipeline: Pipeline, placement: Placement, items: int, frame_time: float
             ) -> tuple[float, float]:
    """items/s and the driver's CPU seconds per item at ``frame_time``."""
    local_driver.FRAME_TIME = frame_time
    cpu0 = time.process_time()
    with fitwork.run(pipeline, range(items), placement=placement) as result:
        count = sum(1 for _ in result)
    cpu = time.process_time() - cpu0
    record = result.record
    assert count > 0 and record.items_completed == items, (count, record.items_completed)
    return record.throughput, cpu / items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--items", type=int, default=800)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--split", action="store_true",
                        help="the units split, records x1 and featurise x2 (a hand layout), "
                        "not fused")
    args = parser.parse_args()
    pipeline = Pipeline(fq.batch_of, fq.records, fq.valid, fq.featurise, name="fanout_filter")
    placement = Placement((Group(FUSED, args.processes),), "workers",
                          fusion=(tuple(u.name for u in pipeline.units),))
    if args.split:
        placement = Placement.declared(pipeline, {"batch_of": 1, "records": 1, "valid": 1,
                                                  "featurise": 2})
    rates: dict[float, list[float]] = {s: [] for s in SETTINGS}
    driver: dict[float, list[float]] = {s: [] for s in SETTINGS}
    run_once(pipeline, placement, 200, SETTINGS[0])  # warm: imports, the first fork
    for k in range(args.rounds):
        for setting in SETTINGS if k % 2 == 0 else SETTINGS[::-1]:
            rate, cpu = run_once(pipeline, placement, args.items, setting)
            rates[setting].append(rate)
            driver[setting].append(cpu)
            print(f"round {k + 1}: frames of {setting * 1e3:.0f} ms: {rate:,.1f} items/s, "
                  f"driver {cpu * 1e6:,.0f} us per item", flush=True)
    local_driver.FRAME_TIME = SETTINGS[0]
    for setting in SETTINGS:
        print(f"frames of {setting * 1e3:.0f} ms: median {statistics.median(rates[setting]):,.1f}"
              f" items/s over {args.rounds} rounds (total {sum(rates[setting]):,.0f}); driver "
              f"{statistics.median(driver[setting]) * 1e6:,.0f} us of CPU per item")
    ratio = sum(rates[SETTINGS[1]]) / sum(rates[SETTINGS[0]])
    print(f"20 ms over 5 ms, pooled over the rounds: {ratio:.3f}x items/s; per round: "
          + ", ".join(f"{b / a:.2f}" for a, b in zip(rates[SETTINGS[0]], rates[SETTINGS[1]],
                                                        strict=True)))


if __name__ == "__main__":
    main()
