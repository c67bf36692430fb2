"""Throughput with rows that kill their worker, against the same run with none.

A unit SIGKILLs its own worker (as a native decoder's segfault does) the first time it
meets a "bad" row: ``--bad`` of the rows (0.1% by default), chosen by a hash of the row
number; a marker file per row, made before the kill, lets the next worker that meets it
live.  The same rows run on the local engine driver-fed (a JSON Lines file read by this
process) and sharded (`Source.files` into `Sink.files` parts; ``--modes sharded-own``: with a
reader of its own in front of the unit), each once with no bad rows
and once with them per ``--spares`` count (spare workers forked ahead; 0: none), in
``--rounds`` rounds, the clean run first in even rounds and last in odd ones.  Printed per
run: rows/s of both, their ratio, worker restarts, rows lost and doubled (both must be 0:
every row's output is counted), wall ms each death cost, the median ms from a death to its
replacement's first call, and the load average; under it, where a death's cost went: the
driver's and the workers' extra CPU ms per death, the processes the driver forked, retry
frames and records fed again per death, and rows per fresh frame (against the clean
run's); per mode, the median ratio.

``--engine ray`` times the same bad rows on a Ray cluster started on this host (its own
temp dir, this host's cores) against the local engine, driver-fed, in ``--rounds`` rounds,
Ray first in even rounds and last in odd ones: wall seconds of each, their ratio, deaths,
spares handed over (built by then), rows lost and doubled, each unit's items in, and the
load average; ``--fork-first`` adds Ray with the option ``fork_first`` (every replica runs
its unit in a forked child from the start) as a third contender.  ``--always SHARE`` adds
rows that kill every worker that meets them to the bad-row runs: each must end
dead-lettered as poison (the run fails otherwise), and the deaths each cost are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fitwork
from fitwork import Pipeline, Source, unit
from fitwork.engine.parts import read_parts
from fitwork.io.inputs import read_items

MARKS = "FITWORK_BENCH_POISON_MARKS"
BAD = "FITWORK_BENCH_POISON_PER_MILLION"
ALWAYS = "FITWORK_BENCH_POISON_ALWAYS_PER_MILLION"
WORK = "FITWORK_BENCH_POISON_WORK_US"


def bad(n: int, per_million: int) -> bool:
    """Whether row ``n`` is bad (a fixed hash, so both modes meet the same rows)."""
    return (n * 2654435761) % 1_000_000 < per_million


def always(n: int, per_million: int, once: int) -> bool:
    """Whether row ``n`` kills every worker that meets it (another fixed hash; never a row
    that `bad` picks at ``once`` per million)."""
    return (n * 40503 + 7919) % 1_000_000 < per_million and not bad(n, once)


@unit(cpu=1.0)
def decode(row: dict[str, Any]) -> dict[str, int]:
    """A light unit that dies the first time it meets a bad row."""
    n = int(row["n"])
    once = int(os.environ.get(BAD, "0"))
    if always(n, int(os.environ.get(ALWAYS, "0")), once):
        os.kill(os.getpid(), signal.SIGKILL)
    if bad(n, once):
        try:
            os.close(os.open(os.path.join(os.environ[MARKS], str(n)),
                             os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGKILL)
    spin = int(os.environ.get(WORK, "0")) / 1e6
    if spin:  # a heavier row: CPU work, as a decoder's
        end = time.thread_time() + spin
        while time.thread_time() < end:
            pass
    return {"n": n, "sum": sum(row["v"])}


def write_input(path: Path, items: int) -> None:
    with path.open("w") as handle:
        for n in range(items):
            handle.write(json.dumps({"n": n, "v": list(range(n % 7, n % 7 + 8))}) + "\n")


def handover_ms(record: Any) -> float:
    """Median milliseconds from a worker's death to its replacement's first call (a start,
    or a spare's hand-over), from the run record.  A replacement that died before it
    reported a call (its busy intervals come with its first frame done) is left out."""
    live = sorted((w for w in record.workers if w.worker_id >= 0), key=lambda w: w.started_s)
    gaps = []
    for dead in live:
        if dead.exit_code in (None, 0) or dead.ended_s is None:
            continue
        after = [w for w in live if w.started_s >= dead.ended_s and w.unit == dead.unit]
        if after and after[0].busy_intervals:
            gaps.append(after[0].busy_intervals[0][0] - dead.ended_s)
    return statistics.median(gaps) * 1e3 if gaps else 0.0


FORKS = [0]  # processes this one forked (the driver runs here): counted at each fork
os.register_at_fork(before=lambda: FORKS.__setitem__(0, FORKS[0] + 1))


@dataclass
class Outcome:
    """One run: wall seconds, each row's output count, and where its time went."""

    wall: float
    seen: Counter[int]
    restarts: int = 0
    handover_ms: float = 0.0
    driver_cpu: float = 0.0  # CPU seconds of this process (the driver) in the run
    worker_cpu: float = 0.0  # of its children: workers, spares, zygotes (reaped)
    forks: int = 0  # processes the driver forked
    frames: int = 0  # fresh frames fed (retries not counted)
    retries: int = 0  # retry frames (groups, singles, pieces)
    fed_twice: int = 0  # records fed again in retry frames
    poisoned: int = 0  # rows dead-lettered as poison


def core_of(result: Any) -> Any:
    """The run core behind a result (a sharded run's is inside the output's run)."""
    run = result._run
    inner = getattr(run, "result", None)
    return inner._run.core if inner is not None else run.core


def run(mode: str, path: Path, items: int, workdir: Path, split_bytes: int,
        workers: int, spares: int = 1) -> Outcome:
    """One run, timed, its outputs counted and its death costs read from its core."""
    pipeline = Pipeline(decode, name="poison_bench")
    forks, cpu = FORKS[0], os.times()
    start = time.perf_counter()
    out = workdir / f"out-{time.monotonic_ns()}"
    if mode == "driver-fed":
        with fitwork.run(pipeline, read_items(path), engine="local",
                         workers={"decode": workers}, spares=spares) as result:
            seen = Counter(row["n"] for row in result)
    else:  # sharded: the readers run decode; sharded-own: a reader of its own hands rows on
        asked = {"decode": workers} | ({"read": 1} if mode == "sharded-own" else {})
        with fitwork.run(pipeline, Source.files(str(path), split_bytes=split_bytes),
                         engine="local", workers=asked, spares=spares,
                         output=fitwork.Sink.files(out)) as result:
            for _ in result:
                pass
    wall = time.perf_counter() - start
    after = os.times()
    if mode != "driver-fed":
        seen = Counter(int(row["n"]) for row in read_parts(out))
    record, core = result.record, core_of(result)
    fresh = next(core.frame_ids) - 1 - core.retries
    return Outcome(
        wall, seen, record.worker_restarts, handover_ms(record),
        driver_cpu=after.user + after.system - cpu.user - cpu.system,
        worker_cpu=(after.children_user + after.children_system
                    - cpu.children_user - cpu.children_system),
        forks=FORKS[0] - forks, frames=fresh, retries=core.retries,
        fed_twice=core.fed_records - core.fed, poisoned=record.poisoned)


HEAD = (f"{'mode':<11} {'order':<10} {'spares':>6} {'clean rows/s':>13} {'bad rows/s':>11} "
        f"{'ratio':>6} {'restarts':>9} {'lost':>5} {'doubled':>8} {'ms/death':>9} "
        f"{'to work ms':>10} {'load':>5}")
COST = (f"{'':<11} {'per death:':<10} {'driver ms':>9} {'workers ms':>10} {'forks':>6} "
        f"{'retries':>8} {'fed again':>9} {'rows/frame':>10} {'(clean)':>8}")


def breakdown(mode: str, bad: Outcome, clean: Outcome, items: int) -> str:
    """Where a death's cost went: extra CPU of the driver and of the workers, per death,
    the processes the driver forked, retry frames and records fed again per death (a
    sharded run's records are shards and pieces of them), and rows per fresh frame (bad
    run, then the clean run's; a sharded run's frames hold shards: not shown)."""
    deaths = max(1, bad.restarts)
    sizes = (f"{items / max(1, bad.frames):>10.0f} {items / max(1, clean.frames):>8.0f}"
             if mode == "driver-fed" else f"{'-':>10} {'-':>8}")
    return (f"{'':<11} {'per death:':<10} "
            f"{(bad.driver_cpu - clean.driver_cpu) / deaths * 1e3:>9.1f} "
            f"{(bad.worker_cpu - clean.worker_cpu) / deaths * 1e3:>10.1f} "
            f"{bad.forks:>6} {bad.retries / deaths:>8.2f} {bad.fed_twice / deaths:>9.1f} "
            f"{sizes}")


def one_round(mode: str, path: Path, workdir: Path, args: argparse.Namespace,
              per_million: int, want: Counter[int], ratios: dict[str, list[float]],
              clean_first: bool) -> bool:
    """A clean run and one with bad rows per ``--spares`` setting (the clean one first, or
    last: both orders), each printed with its breakdown; each ratio noted under its
    setting.  True if any run lost or doubled a row."""
    marks = workdir / f"marks-{mode}"
    marks.mkdir(exist_ok=True)
    os.environ[MARKS] = str(marks)

    def clean_run() -> Outcome:
        os.environ[BAD] = os.environ[ALWAYS] = "0"
        outcome = run(mode, path, args.items, workdir, args.split_bytes, args.workers)
        assert outcome.seen == want, "the clean run lost or doubled rows"
        return outcome

    clean = clean_run() if clean_first else None
    os.environ[BAD] = str(per_million)
    os.environ[ALWAYS] = str(round(args.always * 1_000_000))
    poisons = [n for n in range(args.items)
               if always(n, round(args.always * 1_000_000), per_million)]
    bads: list[tuple[str, Outcome, float]] = []
    for spares in args.spares.split(","):
        for mark in marks.iterdir():  # every once-killer kills again
            mark.unlink()
        bads.append((spares, run(mode, path, args.items, workdir, args.split_bytes,
                                 args.workers, int(spares)), os.getloadavg()[0]))
    clean = clean or clean_run()
    failed = False
    kept = want - Counter(poisons)  # rows that kill every time make no output
    once = sum(1 for n in range(args.items) if bad(n, per_million))
    for spares, outcome, load in bads:
        lost = sum((kept - outcome.seen).values())
        doubled = sum((outcome.seen - kept).values())
        failed |= outcome.poisoned != len(poisons)
        failed |= bool(lost or doubled)
        ratios.setdefault(spares, []).append(clean.wall / outcome.wall)
        per_death = ((outcome.wall - clean.wall) / outcome.restarts * 1e3
                     if outcome.restarts else 0.0)
        print(f"{mode:<11} {'clean 1st' if clean_first else 'clean 2nd':<10} {spares:>6} "
              f"{args.items / clean.wall:>13,.0f} {args.items / outcome.wall:>11,.0f} "
              f"{clean.wall / outcome.wall:>6.2f} {outcome.restarts:>9} {lost:>5} "
              f"{doubled:>8} "
              f"{per_death:>9.1f} {outcome.handover_ms:>10.1f} {load:>5.1f}")
        print(breakdown(mode, outcome, clean, args.items), flush=True)
        if poisons:  # each once-killer dies once: the other deaths are theirs
            print(f"{'':<11} {len(poisons)} rows kill every time: {outcome.poisoned} "
                  f"dead-lettered as poison, {(outcome.restarts - once) / len(poisons):.1f} "
                  "deaths each",
                  flush=True)
    return failed


def timed(engine: str, path: Path, workers: int, **options: Any
          ) -> tuple[float, Counter[int], Any]:
    """One driver-fed run with bad rows on ``engine`` (with its ``options``): wall seconds,
    outputs, record."""
    pipeline = Pipeline(decode, name="poison_bench")
    start = time.perf_counter()
    with fitwork.run(pipeline, read_items(path), engine=engine,
                     workers={"decode": workers}, **options) as result:
        seen = Counter(row["n"] for row in result)
    return time.perf_counter() - start, seen, result.record


def ray_vs_local(args: argparse.Namespace, path: Path, workdir: Path, per_million: int,
                 want: Counter[int]) -> bool:
    """Bad-row runs on Ray and on the local engine, both orders; True if any lost or
    doubled a row."""
    import ray

    os.environ["PYTHONPATH"] = os.pathsep.join(  # the replicas import this module
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    marks = workdir / "marks-ray"  # the replicas read these from the environment Ray
    marks.mkdir()                  # starts them with: set before the cluster starts
    os.environ[MARKS], os.environ[BAD] = str(marks), str(per_million)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 2**20, _temp_dir=str(workdir / "ray"))
    print(f"{'round':<6} {'engine':<8} {'wall s':>7} {'deaths':>7} {'spares':>7} "
          f"{'built':>6} {'lost':>5} {'doubled':>8} {'items in':>9} {'load':>5}")
    contenders = ["ray", "ray fork", "local"] if args.fork_first else ["ray", "local"]
    failed, ratios = False, {c: [] for c in contenders if c != "local"}
    for turn in range(args.rounds):
        walls = {}
        for engine in contenders if turn % 2 == 0 else contenders[::-1]:
            for mark in marks.iterdir():  # every once-killer kills again
                mark.unlink()
            options = {"fork_first": True} if engine == "ray fork" else {}
            wall, seen, record = timed(engine.split()[0], path, args.workers, **options)
            walls[engine] = wall
            lost, doubled = sum((want - seen).values()), sum((seen - want).values())
            failed |= bool(lost or doubled)
            spares = (record.host or {}).get("ray_spares", {}).get("decode", {})
            print(f"{turn:<6} {engine:<8} {wall:>7.2f} {record.worker_restarts:>7} "
                  f"{spares.get('handed_over', '-'):>7} {spares.get('built_when_handed', '-'):>6} "
                  f"{lost:>5} {doubled:>8} {record.units[0].items_in:>9} "
                  f"{os.getloadavg()[0]:>5.1f}", flush=True)
        for contender, found in ratios.items():
            found.append(walls[contender] / walls["local"])
            print(f"{turn:<6} {contender} / local wall: {found[-1]:.2f}x "
                  f"({contenders[0] if turn % 2 == 0 else 'local'} first)", flush=True)
    for contender, found in ratios.items():
        print(f"median {contender} / local wall over {args.rounds} rounds: "
              f"{statistics.median(found):.2f}x (aim: <= 2x)")
    ray.shutdown()
    return failed


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command line's settings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000,
                        help="rows (default 200,000; the issue's figure is 1,000,000)")
    parser.add_argument("--bad", type=float, default=0.001,
                        help="share of rows that kill their worker once (default 0.001)")
    parser.add_argument("--always", type=float, default=0.0,
                        help="share of rows that kill every worker that meets them (default "
                             "0); each must end dead-lettered as poison, the rest output once")
    parser.add_argument("--split-bytes", type=int, default=1 << 20,
                        help="bytes of input a shard covers (default 1 MiB)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work-us", type=int, default=0,
                        help="CPU microseconds each row costs beyond reading it (default 0: "
                             "a light row of ~8 us; a decoder's row costs a millisecond or more)")
    parser.add_argument("--modes", default="driver-fed,sharded")
    parser.add_argument("--engine", choices=("local", "ray"), default="local",
                        help="ray: bad-row runs on a Ray cluster of this host against the "
                             "local engine, driver-fed, both orders (default local)")
    parser.add_argument("--fork-first", action="store_true",
                        help="with --engine ray: also run Ray with fork_first=True (every "
                             "replica runs its unit in a forked child from the start)")
    parser.add_argument("--spares", default="1,0",
                        help="runs with bad rows: how many spare workers a unit that lost one "
                             "keeps forked ahead, one run per count (default 1,0; 0: every "
                             "death forks and builds a new worker)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds per mode, each a clean run and the bad-row runs, the "
                             "clean run first in even rounds and last in odd ones (default "
                             "2: both orders); the median ratio is printed (a shared host's "
                             "load moves a single run's speed several-fold)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    per_million = round(args.bad * 1_000_000)
    with tempfile.TemporaryDirectory(prefix="fitwork-poison-") as temp:
        workdir = Path(temp)
        path = workdir / "rows.jsonl"
        write_input(path, args.items)
        want = Counter(range(args.items))
        expected_bad = sum(1 for n in range(args.items) if bad(n, per_million))
        os.environ[WORK] = str(args.work_us)
        print(f"{args.items:,} rows, {expected_bad} of them kill their worker once "
              f"({args.bad:.2%}), {args.workers} workers, local engine, "
              f"{args.work_us} us of extra CPU a row")
        print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
              f"({os.cpu_count()} cores)")
        if args.engine == "ray":
            return 1 if ray_vs_local(args, path, workdir, per_million, want) else 0
        print(HEAD)
        print(COST)
        failed = False
        for mode in args.modes.split(","):
            ratios: dict[str, list[float]] = {}
            for turn in range(args.rounds):
                failed |= one_round(mode, path, workdir, args, per_million, want, ratios,
                                    clean_first=turn % 2 == 0)
            print(f"{mode:<11} median of {args.rounds} rounds (each against its own clean "
                  "run): " + ", ".join(f"spares {k} {statistics.median(v):.2f}x"
                                       for k, v in ratios.items()), flush=True)
        print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
              f"({os.cpu_count()} cores)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
