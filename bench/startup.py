"""The local engine's own start-up: a run's set-up and each replica's, against the fit's charges.

`fitwork.fit.startup` charges a short run `RUN_START_S` plus `REPLICA_START_S` per replica
before its units' builds.  This script measures both with a unit that does nothing: the
wall time of runs of 4 items per replica at 1, 4 and 16 replicas (the lowest of a few
rounds, after one run that warms the process), fitted as a line in the replica count.  It
does so with the driver small and again holding a 600 MB array (a fork copies the page
tables), for a plain unit and an ``io`` unit (a thread pool to start).  It prints the
measured figures beside the charges and their ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fitwork
from fitwork import Pipeline, Unit, unit
from fitwork.fit.startup import REPLICA_START_S, RUN_START_S

REPLICAS = (1, 4, 16)


@unit
def nothing(x: int) -> int:
    """A unit that does nothing."""
    return x


@unit(io=64)
def nothing_io(x: int) -> int:
    """The same, with up to 64 calls in flight in threads."""
    return x


def elapsed(chosen: Unit, replicas: int, rounds: int) -> float:
    """The lowest wall time of ``rounds`` runs of 4 items per replica."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        with fitwork.run(Pipeline(chosen, name="nothing"), range(4 * replicas),
                         workers={chosen.name: replicas}) as result:
            assert sum(1 for _ in result) == 4 * replicas
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    """Print each case's per-run and per-replica seconds against the fit's charges."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="runs per point; the lowest")
    args = parser.parse_args()
    elapsed(nothing, 1, 1)  # the process's first run reads its modules and the host
    print(f"charged: run {RUN_START_S * 1e3:.1f} ms, replica {REPLICA_START_S * 1e3:.1f} ms")
    print("driver          unit         run ms   replica ms   replica / charged")
    ballast = None
    for driver in ("small", "600 MB held"):
        if driver != "small":
            ballast = np.ones(600 * 2**20 // 8)
        for chosen in (nothing, nothing_io):
            walls = [elapsed(chosen, r, args.rounds) for r in REPLICAS]
            per = (walls[-1] - walls[0]) / (REPLICAS[-1] - REPLICAS[0])
            run = walls[0] - per * REPLICAS[0]
            print(f"{driver:<15} {chosen.name:<12} {run * 1e3:>6.1f}   {per * 1e3:>10.1f}   "
                  f"{per / REPLICA_START_S:>17.2f}")
    del ballast


if __name__ == "__main__":
    main()
