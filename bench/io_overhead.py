"""Engine CPU per item of an `io=8` unit that waits, against the same calls in bare thread pools.

Each replica of the unit runs up to 8 calls at once in threads, each call sleeping 20 ms and
building a small record.  The baseline is what a person would write without fitwork: as many
forked processes as replicas, each with an 8-thread ``ThreadPoolExecutor`` and a semaphore
keeping 8 calls in flight.  Both sides are timed in this script, alternating, as CPU seconds
per item (the replicas' or the processes', differenced between a short and a long run so the
start-up drops out), and the engine's figure is printed as a ratio of the pool's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fitwork
from fitwork import Pipeline, unit

IO = 8
WAIT_S = 0.020
SHORT, LONG = 150, 600  # items per replica in the two runs differenced


@unit(io=IO)
def lookup(number: int) -> dict[str, Any]:
    """A lookup: 20 ms of waiting, then a small record."""
    time.sleep(WAIT_S)
    return {"id": number, "x": float(number % 97)}


def engine_cpu(replicas: int, per_replica: int) -> float:
    """CPU seconds the engine's replicas and this driver spent on a run."""
    start = time.process_time()
    with fitwork.run(Pipeline(lookup, name="lookup"), range(replicas * per_replica),
                     workers={"lookup": replicas}) as result:
        assert sum(1 for _ in result) == replicas * per_replica
    return sum(u.cpu_s for u in result.record.units) + time.process_time() - start


def _pool_process(count: int) -> None:
    """One process: ``count`` calls through an 8-thread pool, 8 in flight."""
    slots = threading.Semaphore(IO)
    with ThreadPoolExecutor(IO) as pool:
        for number in range(count):
            slots.acquire()
            pool.submit(lookup.fn, number).add_done_callback(lambda _: slots.release())


def pool_cpu(replicas: int, per_replica: int) -> float:
    """CPU seconds ``replicas`` forked processes spent on the same calls (their own and
    their children's, as the kernel counts them once they are reaped)."""
    before = os.times()
    children = []
    for _ in range(replicas):
        pid = os.fork()
        if pid == 0:
            try:
                _pool_process(per_replica)
            finally:
                os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    after = os.times()
    return (after.children_user - before.children_user
            + after.children_system - before.children_system)


def per_item(measure: Any, replicas: int) -> float:
    """CPU seconds per item, the start-up differenced out."""
    return (measure(replicas, LONG) - measure(replicas, SHORT)) / (replicas * (LONG - SHORT))


def main() -> None:
    """Print, for each replica count, both sides' CPU per item and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replicas", default="1,4,16", help="comma-separated counts")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians")
    args = parser.parse_args()
    print(f"io={IO} unit waiting {WAIT_S * 1e3:.0f} ms per call; CPU per item, medians of "
          f"{args.rounds} alternating rounds")
    print("replicas   engine us   bare pools us   engine / pools")
    for replicas in (int(r) for r in args.replicas.split(",")):
        engine, pools = [], []
        for _ in range(args.rounds):
            engine.append(per_item(engine_cpu, replicas))
            pools.append(per_item(pool_cpu, replicas))
        e, p = statistics.median(engine), statistics.median(pools)
        print(f"{replicas:>8}   {e * 1e6:>9.0f}   {p * 1e6:>13.0f}   {e / p:>14.2f}")


if __name__ == "__main__":
    main()
