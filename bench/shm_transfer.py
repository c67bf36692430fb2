"""Shared-memory transfer: 64 MiB arrays between two fitwork stages against multiprocessing."""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from fitwork import Pipeline, unit

ELEMENTS = 8 * 1024 * 1024  # float64: 64 MiB per array
ARRAY_BYTES = ELEMENTS * 8
SETTINGS = {"stride": 4096}  # set in main before any fork; children inherit it
_CTX = multiprocessing.get_context("fork")


def make(seed: int) -> np.ndarray:
    """Producer work: a fresh 64 MiB array filled with the seed."""
    return np.full(ELEMENTS, seed, dtype=np.float64)


def reduce(arr: np.ndarray) -> float:
    """Consumer work: a sum over every ``stride``-th element (1 = read every byte)."""
    return float(arr[:: SETTINGS["stride"]].sum())


def expected(seeds: range) -> list[float]:
    """What `reduce` gives for each seed's array, sorted."""
    per_array = len(range(0, ELEMENTS, SETTINGS["stride"]))
    return sorted(float(seed * per_array) for seed in seeds)


def check(outputs: list[float], seeds: range, label: str) -> None:
    """Sanity check: one correct result per array, in any order."""
    if sorted(outputs) != expected(seeds):
        raise SystemExit(f"{label}: wrong outputs {sorted(outputs)[:4]}...")


PIPELINE = Pipeline(unit(name="make")(make), unit(name="reduce")(reduce), name="shm-transfer")


@dataclass
class Measure:
    """One timed run, end to end (process start-up included)."""

    wall_s: float
    bytes_in: int = 0
    bytes_out: int = 0


def run_fitwork(arrays: int) -> Measure:
    """make -> reduce through fitwork's local engine (frames spilled to /dev/shm)."""
    seeds = range(arrays)
    start = time.perf_counter()
    with PIPELINE.run(seeds) as result:
        outputs = list(result)
    wall = time.perf_counter() - start
    check(outputs, seeds, "fitwork")
    record = result.record
    return Measure(wall, record.units[1].bytes_in, record.units[0].bytes_out)


def queue_producer(data: Any, arrays: int) -> None:
    """Baseline producer: pickle each array through a bounded multiprocessing.Queue."""
    for seed in range(arrays):
        data.put(make(seed))
    data.put(None)


def queue_consumer(data: Any, results: Any) -> None:
    """Baseline consumer: reduce each array from the queue, report the sums."""
    while (arr := data.get()) is not None:
        results.put(reduce(arr))
    results.put(None)


def run_queue(arrays: int) -> Measure:
    """The same hand-off through multiprocessing.Queue(maxsize=2)."""
    seeds = range(arrays)
    start = time.perf_counter()
    data, results = _CTX.Queue(maxsize=2), _CTX.Queue()
    procs = [_CTX.Process(target=queue_producer, args=(data, arrays)),
             _CTX.Process(target=queue_consumer, args=(data, results))]
    for proc in procs:
        proc.start()
    outputs = list(iter(results.get, None))
    for proc in procs:
        proc.join()
    wall = time.perf_counter() - start
    check(outputs, seeds, "Queue")
    return Measure(wall)


def pipe_producer(send: Connection, arrays: int) -> None:
    """Baseline producer: pickle each array down a multiprocessing.Pipe."""
    for seed in range(arrays):
        send.send(make(seed))
    send.send(None)
    send.close()


def pipe_consumer(recv: Connection, results: Connection) -> None:
    """Baseline consumer: reduce each array from the pipe, send the sums back."""
    while (arr := recv.recv()) is not None:
        results.send(reduce(arr))
    results.send(None)
    results.close()


def run_pipe(arrays: int) -> Measure:
    """The same hand-off through a one-way multiprocessing.Pipe."""
    seeds = range(arrays)
    start = time.perf_counter()
    data_recv, data_send = _CTX.Pipe(duplex=False)
    result_recv, result_send = _CTX.Pipe(duplex=False)
    procs = [_CTX.Process(target=pipe_producer, args=(data_send, arrays)),
             _CTX.Process(target=pipe_consumer, args=(data_recv, result_send))]
    for proc in procs:
        proc.start()
    for end in (data_send, data_recv, result_send):
        end.close()
    outputs = list(iter(result_recv.recv, None))
    for proc in procs:
        proc.join()
    wall = time.perf_counter() - start
    check(outputs, seeds, "Pipe")
    return Measure(wall)


def creation_seconds(samples: int = 5) -> float:
    """Median seconds `make` takes for one array here (the producer's own work)."""
    times = []
    for seed in range(samples):
        start = time.perf_counter()
        arr = make(seed)
        times.append(time.perf_counter() - start)
        del arr
    return statistics.median(times)


def gbps(arrays: int, seconds: float) -> float:
    """Payload gigabytes (1e9 bytes) per second."""
    return arrays * ARRAY_BYTES / 1e9 / seconds if seconds > 0 else float("nan")


def main() -> None:
    """Measure, then print GB/s end to end and net of array creation, with ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arrays", type=int, default=20, help="64 MiB arrays per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each; best is kept")
    parser.add_argument("--full-read", action="store_true",
                        help="the consumer reads every element, not every 4096th")
    args = parser.parse_args()
    arrays = args.arrays
    SETTINGS["stride"] = 1 if args.full_read else 4096

    contenders: dict[str, Callable[[], Measure]] = {
        "fitwork local (make -> reduce)": lambda: run_fitwork(arrays),
        "multiprocessing.Queue(maxsize=2)": lambda: run_queue(arrays),
        "multiprocessing.Pipe": lambda: run_pipe(arrays),
    }
    runs: dict[str, list[Measure]] = {name: [] for name in contenders}
    for _ in range(args.repeats):  # interleaved, so drift on the machine hits all alike
        for name, measure in contenders.items():
            runs[name].append(measure())
    results = {name: min(found, key=lambda m: m.wall_s) for name, found in runs.items()}
    create_s = creation_seconds()
    create_total = arrays * create_s

    print(f"shared-memory transfer: {arrays} arrays x {ARRAY_BYTES >> 20} MiB float64, "
          f"consumer stride {SETTINGS['stride']}, {multiprocessing.cpu_count()} cores, "
          f"best of {args.repeats}")
    print(f"  array creation (np.full) {create_s * 1e3:.1f} ms each, "
          f"{create_total:.2f} s in all; 'net' below subtracts it from the wall time")
    print(f"  {'':<34} {'wall s':>7} {'GB/s end-to-end':>16} {'GB/s net':>9}")
    for name, m in results.items():
        print(f"  {name:<34} {m.wall_s:7.2f} {gbps(arrays, m.wall_s):16.2f} "
              f"{gbps(arrays, m.wall_s - create_total):9.2f}")
    mine = results["fitwork local (make -> reduce)"]
    payload = arrays * ARRAY_BYTES
    print(f"  fitwork record: make.bytes_out {mine.bytes_out:,} B, "
          f"reduce.bytes_in {mine.bytes_in:,} B (payload {payload:,} B)")
    if mine.bytes_in < payload // 2:
        print("  note: reduce.bytes_in is far below the payload: it counts only the datagrams "
              "(shared-memory file names), not the bytes the files carried")
    for name, m in list(results.items())[1:]:
        end_to_end = m.wall_s / mine.wall_s
        net = (m.wall_s - create_total) / max(mine.wall_s - create_total, 1e-9)
        aim = "  (aim >= 5x)" if "Queue" in name else ""
        print(f"  ratio fitwork / {name:<34} {end_to_end:5.2f}x end-to-end, "
              f"{net:5.2f}x net{aim}")


if __name__ == "__main__":
    main()
