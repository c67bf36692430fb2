"""Three Ray nodes on this host (``ray start``, object stores capped) run a CPU-bound pipeline
with sharded I/O: rows/s, and per node the rows each unit handled and where its time went.

The same pipeline runs twice on the same cluster, alternating: driver-fed (this process
reads every row and writes every output, as ``fitwork run --output FILE`` does) and sharded
(the replicas read byte ranges of the input and write parts).  The nodes share this host's
cores, so the figures show how the work and the driver's part of it spread, not how a real
three-machine cluster scales.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import fitwork
from fitwork import Pipeline, unit
from fitwork.engine.parts import read_parts
from fitwork.io.inputs import read_items
from fitwork.io.writers import open_writer

RAY = str(Path(sys.executable).with_name("ray"))


@unit(cpu=0.25)
def parse(row: dict[str, Any]) -> dict[str, Any]:
    """Pull the fields out of a row."""
    return {"n": int(row["n"]), "text": row["text"]}


@unit(cpu=0.5)
def crunch(row: dict[str, Any]) -> dict[str, Any]:
    """CPU-bound: a few hundred rounds of hashing per row (about a millisecond)."""
    digest = row["text"].encode()
    for _ in range(400):
        digest = hashlib.sha256(digest).digest()
    return {"n": row["n"], "digest": digest.hex()[:16]}


@unit(cpu=0.25)
def label(row: dict[str, Any]) -> dict[str, Any]:
    """A small output row."""
    return {**row, "even": row["n"] % 2 == 0}


def ray_cmd(*args: str, env: dict[str, str]) -> None:
    """Run ``ray ARGS``; exit with its output if it fails."""
    done = subprocess.run([RAY, *args], capture_output=True, text=True, env=env, timeout=180)
    if done.returncode != 0:
        raise SystemExit(done.stdout + done.stderr)


@contextlib.contextmanager
def three_nodes(temp: Path, modules: Path) -> Any:
    """A head and two worker nodes of one logical CPU each; the cluster's address."""
    # One authentication mode for the head, the nodes that join it and this driver: token,
    # as fitwork starts its own clusters (left to each command, the head took a token and
    # the joining nodes, in the mode Ray defaults to, were refused).  The replicas import
    # the units from ``modules``.
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    env = {**os.environ, "PYTHONPATH": str(modules)}
    port = 6390 + os.getpid() % 500
    common = ["--num-cpus=1", "--object-store-memory=80000000", "--disable-usage-stats"]
    try:
        ray_cmd("start", "--head", f"--port={port}", f"--temp-dir={temp}",
                "--include-dashboard=false", *common, env=env)
        for _ in range(2):
            ray_cmd("start", f"--address=127.0.0.1:{port}", *common, env=env)
        yield f"127.0.0.1:{port}"
    finally:  # only this cluster's processes: others on this host are left alone
        import psutil
        import ray

        ray.shutdown()  # before the cluster goes, or Ray ends this process for losing it

        for process in psutil.process_iter(["cmdline"]):
            command = " ".join(process.info["cmdline"] or [])
            if str(temp) in command or f"127.0.0.1:{port}" in command:
                with contextlib.suppress(psutil.Error):
                    process.kill()


def per_node(record: Any) -> dict[str, dict[str, list[float]]]:
    """Node -> unit -> [rows in, busy s, cpu s], summed over that unit's replicas there."""
    table: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(
        lambda: [0.0, 0.0, 0.0]))
    for worker in record.workers:
        cell = table[(worker.node or "?")[:12]][worker.unit]
        cell[0] += worker.items_in
        cell[1] += worker.busy_s
        cell[2] += worker.cpu_s
    return table


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=30_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fw-scale-"))
    modules = work / "modules"  # this file alone, so the nodes import nothing else of bench/
    modules.mkdir()
    shutil.copy(Path(__file__), modules / "ray_cluster_scale.py")
    sys.path.insert(0, str(modules))
    units = __import__("ray_cluster_scale")  # by module name, as the replicas import them
    pipeline = Pipeline(units.parse, units.crunch, units.label, name="cluster_scale")
    data = work / "in"
    data.mkdir()
    for k in range(6):
        (data / f"{k}.jsonl").write_text("".join(
            json.dumps({"n": n, "text": f"row {n:>30}"}) + "\n"
            for n in range(k, args.rows, 6)))
    workers = {"parse": 1, "crunch": 3, "label": 1}
    short = Path(tempfile.mkdtemp(prefix="fwr-"))  # Ray's socket paths must stay < 108 bytes
    with three_nodes(short, modules) as address:
        print(f"3 Ray nodes of 1 CPU each on this host ({os.cpu_count()} cores), "
              f"{args.rows:,} rows, replicas {workers} (sharded: the readers run parse, "
              "with its replica)")
        results = {}
        for mode in ("driver-fed", "sharded", "driver-fed", "sharded"):
            cpu, wall = time.process_time(), time.perf_counter()
            if mode == "sharded":
                out = work / "parts"
                with fitwork.run(pipeline, fitwork.Source.files(str(data), split_bytes=64_000),
                                 engine="ray", address=address, output=fitwork.Sink.files(out),
                                 workers=workers) as result:
                    outputs = sum(result)
                assert len(read_parts(out)) == args.rows
            else:
                rows = (row for k in range(6) for row in read_items(data / f"{k}.jsonl"))
                with open_writer(work / "fed.jsonl") as writer, fitwork.run(
                        pipeline, rows, engine="ray", address=address,
                        workers=workers) as result:
                    for output in result:
                        writer.write(output)
                    outputs = writer.count
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            assert outputs == args.rows, (mode, outputs)
            best = results.get(mode)
            if best is None or wall < best[0]:
                results[mode] = (wall, cpu, result.record)
        for mode, (wall, cpu, record) in results.items():
            print(f"\n{mode}: {args.rows / wall:,.0f} rows/s, driver {cpu:.2f} CPU s "
                  f"({cpu / args.rows * 1e6:.1f} us per row), best of 2")
            print(f"  {'node':12} {'unit':8} {'rows in':>8} {'busy s':>7} {'cpu s':>6}")
            for node, by_unit in sorted(per_node(record).items()):
                for name, (rows, busy, used) in by_unit.items():
                    print(f"  {node:12} {name:8} {rows:>8,.0f} {busy:7.2f} {used:6.2f}")
        fed, sharded = results["driver-fed"], results["sharded"]
        print(f"\nsharded / driver-fed: throughput {fed[0] / sharded[0]:.2f}x, driver CPU "
              f"{sharded[1] / fed[1]:.2f}x")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(short, ignore_errors=True)


if __name__ == "__main__":
    main()
