"""Driver cost of a run, driver-fed against sharded I/O, on the local engine and on Ray.

The same three light units run over the same JSON Lines rows twice per engine: once as
`fitwork run --output FILE` does it (this process reads every row, feeds it, receives every
output and writes it), once sharded (`Source.files` / `Sink.files`: replicas read byte
ranges of the input and write parts; this process hands out shard ids and keeps books).
Printed: rows/s end to end, and this process's CPU seconds per million rows, with the
sharded figure as a ratio of the driver-fed one measured in the same script; each mode runs
twice, alternating, and its fastest run is kept.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fitwork
from fitwork import Pipeline, unit
from fitwork.engine.parts import read_parts
from fitwork.io.inputs import read_items
from fitwork.io.writers import open_writer


@unit(cpu=0.5)
def parse(row: dict[str, Any]) -> int:
    """Pull the number out of a row."""
    return int(row["n"])


@unit(kind="filter", cpu=0.5)
def keep(n: int) -> bool:
    """Drop one in five."""
    return n % 5 != 0


@unit(cpu=0.5)
def label(n: int) -> dict[str, Any]:
    """A small output row."""
    return {"n": n, "label": f"item {n}"}


PIPELINE = Pipeline(parse, keep, label, name="sharded_bench")


def driver_fed(source: Path, out: Path, engine: str) -> int:
    """Read, feed, receive and write in this process, as `fitwork run --output FILE`."""
    with open_writer(out) as writer, fitwork.run(PIPELINE, read_items(source),
                                                 engine=engine) as result:
        for output in result:
            writer.write(output)
        return writer.count


SPLIT_BYTES = 2 << 20


def sharded(source: Path, out: Path, engine: str, split_bytes: int = SPLIT_BYTES) -> int:
    """Replicas read the input's byte ranges and write the output's parts."""
    with fitwork.run(PIPELINE, fitwork.Source.files(str(source), split_bytes=split_bytes),
                     engine=engine, output=fitwork.Sink.files(out)) as result:
        for _ in result:
            pass
        return result.record.outputs


def measure(run: Callable[[Path, Path, str], int], source: Path, out: Path, engine: str,
            rows: int) -> tuple[float, float]:
    """Rows/s end to end and this process's CPU seconds per million rows."""
    cpu, wall = time.process_time(), time.perf_counter()
    outputs = run(source, out, engine)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert outputs == rows - rows // 5, (outputs, rows)
    return rows / wall, cpu / rows * 1e6


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--ray-rows", type=int, default=100_000)
    parser.add_argument("--engines", default="local,ray")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each mode, alternating; the fastest is kept")
    parser.add_argument("--split-bytes", type=int, default=SPLIT_BYTES,
                        help="the largest byte range of the input one shard covers")
    args = parser.parse_args()
    split = functools.partial(sharded, split_bytes=args.split_bytes)
    work = Path(tempfile.mkdtemp(prefix="fitwork-sharded-"))
    print(f"{'engine':7} {'rows':>8} {'mode':12} {'rows/s':>10} {'driver cpu s / M rows':>22}"
          f" {'sharded / fed':>14}")
    for engine in args.engines.split(","):
        if engine == "ray":
            import ray

            # Ray's workers import the units by module name: this file, as `sharded_io`
            here = str(Path(__file__).resolve().parent)
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                     object_store_memory=256 << 20,
                     runtime_env={"env_vars": {"PYTHONPATH": here}})
            sys.path.insert(0, here)
            module = importlib.import_module("sharded_io")
            global PIPELINE
            PIPELINE = module.PIPELINE
        rows = args.rows if engine == "local" else args.ray_rows
        source = work / f"in-{rows}.jsonl"
        if not source.exists():
            source.write_text("".join(json.dumps({"n": i, "text": f"row {i:>40}"}) + "\n"
                                      for i in range(rows)))
        runs: dict[str, list[tuple[float, float]]] = {"fed": [], "parts": []}
        for repeat in range(args.repeats):  # alternating: on Ray the first run gets the
            # workers Ray started beforehand, later ones start their own
            runs["fed"].append(measure(driver_fed, source, work / f"fed-{engine}.jsonl",
                                       engine, rows))
            runs["parts"].append(measure(split, source,
                                         work / f"parts-{engine}-{repeat}", engine, rows))
        fed, parts = (max(runs[mode]) for mode in ("fed", "parts"))
        assert len(read_parts(work / f"parts-{engine}-0")) == rows - rows // 5
        for mode, (rate, cpu) in (("driver-fed", fed), ("sharded", parts)):
            ratio = f"{cpu / fed[1]:.2f}x cpu" if mode == "sharded" else ""
            print(f"{engine:7} {rows:>8,} {mode:12} {rate:>10,.0f} {cpu:>22.2f} {ratio:>14}")
        print(f"{engine:7} {'':>8} {'throughput':12} {parts[0] / fed[0]:>9.2f}x sharded / fed")
        if engine == "ray":
            ray.shutdown()


if __name__ == "__main__":
    main()
