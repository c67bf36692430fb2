"""Host plan: a plan for this host against its own prediction, per unit, over several runs.

The figure tests/fit/test_plan.py used to assert (within a widened band): the "waits"
pipeline (a spinning unit, a sleeping unit, a spinning unit) profiled and fitted to this
host, then its plan and its monolithic baseline run alternately.  Prints, per side, the
median realized/predicted with its range over the repeats, and per unit the plan's items/s
per replica against the measured items per busy second, so an under-prediction shows
which unit's rate the cost model got wrong::

    .venv/bin/python bench/host_plan.py --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict

import fitwork
from fitwork import Pipeline, unit
from fitwork.fit.plan import plan_for
from fitwork.hardware.discover import discover_local
from fitwork.profiling import profile_pipeline


def spin(seconds: float) -> None:
    """Keep a core busy for ``seconds`` of CPU time."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@unit(cpu=0.2)
def prepare(x: int) -> int:
    spin(0.003)
    return x


@unit(cpu=0.2)
def slow_call(x: int) -> int:
    time.sleep(0.012)
    spin(0.001)
    return x * 2


@unit(cpu=0.2)
def finish(x: int) -> int:
    spin(0.002)
    return x + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--items", type=int, default=900)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    pipeline = Pipeline(prepare, slow_call, finish, name="waits")
    plan = plan_for(profile_pipeline(pipeline, range(16), samples=16), discover_local(), fuse=False)
    print(f"plan: {plan.placement().counts()}, core ceiling {plan.core_ceiling:.2f}; predicted "
          f"fitted {plan.fitted.throughput:.1f} items/s, monolithic "
          f"{plan.monolithic.throughput:.1f}")
    planned = {g.unit: g.rate for g in plan.placement().groups if g.rate}
    shares: dict[str, list[float]] = defaultdict(list)
    measured: dict[str, list[float]] = defaultdict(list)
    for repeat in range(args.repeats):
        sides = [("fitted", plan.placement()),
                 ("monolithic", plan.placement(side="monolithic"))]
        for side, placement in sides if repeat % 2 == 0 else sides[::-1]:
            with fitwork.run(pipeline, range(args.items), placement=placement) as result:
                for _ in result:
                    pass
            predicted = plan.fitted if side == "fitted" else plan.monolithic
            shares[side].append(result.record.throughput / predicted.throughput)
            if side == "fitted":
                for u in result.record.units:
                    if u.busy_s > 0 and u.replicas:
                        measured[u.name].append(u.items_in / u.busy_s)  # per replica
    print(f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end on "
          f"{os.cpu_count()} cores (other work on the host moves every figure)")
    for side, values in shares.items():
        print(f"{side}: realized/predicted median {statistics.median(values):.2f} "
              f"(range {min(values):.2f}-{max(values):.2f}, {len(values)} runs)")
    for name, values in measured.items():
        rate = planned.get(name)
        print(f"  {name}: planned {rate or 0:.1f} items/s per replica, measured "
              f"{statistics.median(values):.1f} items per busy second"
              + (f" ({statistics.median(values) / rate:.2f}x)" if rate else ""))


if __name__ == "__main__":
    main()
