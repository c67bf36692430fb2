"""Many pipelines on this host: a fleet plan against each pipeline planned alone, run at once.

The three pipelines of ``examples/jobs`` (weights 2:1:1) are profiled once and planned two
ways: each alone with `fitwork plan` (the status quo: every team plans the whole host for
itself) and together with `fitwork plan --jobs` (fair). Then, alternating, ``--trials``
times each: every pipeline alone with its own plan (what it gets owning the host, the
normaliser), the three alone-plans started at once (status quo), and `fitwork run --jobs
--plan` (fitwork). A pipeline's rate is its items over the time from its contender's launch
to its end (start-up, and any wait for the cluster, included); the aggregate normalised
throughput is the sum over pipelines of rate ÷ its rate alone, the weighted one weighs each
by its weight; under the ratio, the ceiling the status quo's own figures allow where the
cores are all that is shared (`print_ceiling`). From the fleet record: each pipeline's
realized share of the cores against its planned share while all three run, and how the
others' cores grew once the first finished (the re-fit). Everything through the CLI, in
subprocesses, as a user runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from fitwork.jobs.plan import FleetPlan
from fitwork.jobs.record import FleetRecord
from fitwork.telemetry.record import RunRecord

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "jobs"
NAMES = ("scoring", "tokens", "lookup")
WEIGHTS = {"scoring": 2.0, "tokens": 1.0, "lookup": 1.0}
ENGINE: list[str] = []
"""The engine flags every `fitwork run` here gets (``--engine ray --ray-address A`` on Ray)."""


def fitwork(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One `fitwork` command; its output kept for the error, if any."""
    done = subprocess.run([sys.executable, "-m", "fitwork", *args], cwd=cwd, text=True,
                          capture_output=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"fitwork {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done


def start(name: str, cwd: Path, tag: str) -> subprocess.Popen[bytes]:
    """`fitwork run` of ``name`` with its own alone plan, not waited for."""
    ref = "tokens:pipeline" if name == "tokens" else f"{name}.py:pipeline"
    (cwd / f"out-{tag}").mkdir(exist_ok=True)
    with (cwd / f"out-{tag}" / f"{name}.log").open("wb") as log:  # the child keeps its own
        return subprocess.Popen(
            [sys.executable, "-m", "fitwork", "run", ref, "--input", f"{name}.jsonl",
             "--output", f"out-{tag}/{name}.jsonl", "--plan", f"{name}.plan.json", "--quiet",
             "--record", f"out-{tag}/{name}.jsonl.record.json", "--no-journal", *ENGINE],
            cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(cwd)})


FAILED: list[str] = []
"""Runs of the status quo or fitwork that wrote no record: the pipeline, and its error."""


def rates(cwd: Path, tag: str, spans: dict[str, float]) -> dict[str, float]:
    """Each pipeline's items over ``spans[name]``, the seconds from its contender's launch
    to its end (a pipeline that waited for the cluster, or for its start-up, waited in
    them); a pipeline of the status quo or fitwork that failed counts 0 (and is listed in
    `FAILED`)."""
    found = {}
    for name in NAMES:
        path = cwd / f"out-{tag}" / f"{name}.jsonl.record.json"
        if not path.exists():
            log = cwd / f"out-{tag}" / f"{name}.log"
            said = log.read_text()[-2000:] if log.exists() else "(no log)"
            if tag.startswith("alone"):  # the normaliser: nothing to compare without it
                raise SystemExit(f"{name} ({tag}) wrote no run record; its output:\n{said}")
            last = [line for line in said.splitlines() if line.strip()][-1:] or ["(no output)"]
            FAILED.append(f"{name} ({tag}): {last[0][:300]}")
            found[name] = 0.0
            continue
        found[name] = RunRecord.load(path).items_in / spans[name]
    return found


def alone(cwd: Path, trial: int) -> dict[str, float]:
    """Each pipeline alone on the host with its own plan."""
    tag, spans = f"alone{trial}", {}
    for name in NAMES:
        began = time.time()
        start(name, cwd, tag).wait()
        spans[name] = time.time() - began
    return rates(cwd, tag, spans)


def status_quo(cwd: Path, trial: int) -> dict[str, float]:
    """The three alone plans started at once."""
    tag, began = f"quo{trial}", time.time()
    running = {name: start(name, cwd, tag) for name in NAMES}
    spans = {}
    while running:
        for name, p in list(running.items()):
            if p.poll() is not None:
                spans[name] = time.time() - began
                del running[name]
        time.sleep(0.02)
    return rates(cwd, tag, spans)


def fleet(cwd: Path, trial: int) -> tuple[dict[str, float], FleetRecord]:
    """`fitwork run --jobs --plan`: the fleet plan, re-fitted as pipelines finish."""
    tag = f"fleet{trial}"
    jobs = (cwd / "jobs.yaml").read_text().replace("out/", f"out-{tag}/")
    (cwd / f"jobs-{tag}.yaml").write_text(jobs)
    began = time.time()
    fitwork("run", "--jobs", f"jobs-{tag}.yaml", "--plan", "fleet.json", "--fleet-record",
            f"{tag}.json", *ENGINE, cwd=cwd)
    record = FleetRecord.load(cwd / f"{tag}.json")
    spans = {o.name: record.started_at + (o.ended_s or 0.0) - began for o in record.jobs}
    return rates(cwd, tag, spans), record


def own_record(cwd: Path, record: FleetRecord, name: str) -> RunRecord | None:
    """``name``'s own run record (None if it wrote none)."""
    outcome = next(o for o in record.jobs if o.name == name)
    if outcome.record is None or not (cwd / outcome.record).exists():
        return None
    return RunRecord.load(cwd / outcome.record)


def done_by(cwd: Path, record: FleetRecord, name: str) -> tuple[list[tuple[float, int]],
                                                                   RunRecord | None]:
    """``name``'s completions (time on the fleet run's clock, count so far) and its record."""
    own = own_record(cwd, record, name)
    if own is None:
        return [], None
    offset = own.started_at - record.started_at
    return [(t + offset, c) for t, c in zip(own.completions.times_s,
                                            own.completions.completed, strict=True)], own


def first_output(cwd: Path, record: FleetRecord, name: str) -> float | None:
    """When ``name`` completed its first item, on the fleet run's clock (None: never)."""
    return next((t for t, c in done_by(cwd, record, name)[0] if c > 0), None)


def together(cwd: Path, record: FleetRecord, warm: bool = False
             ) -> tuple[float, float] | None:
    """The stretch in which all three ran: locally the longest epoch with three running; on
    Ray (no samples) from each one's first completion to the first departure.  ``warm``:
    from the latest first completion of the three on (start-up left out: the plan's rates
    are each pipeline's steady state)."""
    firsts = [first_output(cwd, record, n) for n in NAMES]
    epochs = [e for e in record.epochs if len(e.running) == 3]
    if epochs:
        main = max(epochs, key=lambda e: e.end_s - e.start_s)
        start, end = main.start_s, main.end_s
        if warm:
            if None in firsts:
                return None
            start = max(start, *(t for t in firsts if t is not None))
        return (start, end) if end - start > 0.5 else None
    ends = [o.ended_s for o in record.jobs if o.ended_s is not None]
    if None in firsts or not ends:
        return None
    start, end = max(t for t in firsts if t is not None), min(ends)
    return (start, end) if end - start > 1.0 else None


def epoch_rate(cwd: Path, record: FleetRecord, name: str, warm: bool = False
               ) -> float | None:
    """``name``'s source items/s while all three ran (``warm``: past start-up), from its
    own run record's completions placed on the fleet run's clock."""
    window = together(cwd, record, warm)
    points, _ = done_by(cwd, record, name)
    if window is None or not points:
        return None

    def done_at(at: float) -> float:
        before = [c for t, c in points if t <= at]
        return float(before[-1]) if before else 0.0

    return (done_at(window[1]) - done_at(window[0])) / (window[1] - window[0])


def record_shares(cwd: Path, record: FleetRecord) -> dict[str, float]:
    """Each pipeline's share of the cores the three used while all three ran, from its own
    run record: its workers' CPU seconds per item times its items/s in that stretch."""
    cores = {}
    for name in NAMES:
        rate, own = epoch_rate(cwd, record, name), own_record(cwd, record, name)
        if rate is None or own is None or not own.items_in:
            return {}
        cores[name] = sum(w.cpu_s for w in own.workers) / own.items_in * rate
    total = sum(cores.values())
    return {n: c / total for n, c in cores.items()} if total > 0 else {}


def planned_shares(record: FleetRecord) -> dict[str, float]:
    """Each pipeline's planned share while all three run: the first decision's cores."""
    cores = {n: c for n, c in record.decisions[0].cores.items() if n in NAMES and c > 0}
    total = sum(cores.values())
    return {n: c / total for n, c in cores.items()} if total > 0 else {}


def normalised(found: dict[str, float], base: dict[str, float], weighted: bool) -> float:
    """Sum over pipelines of rate over rate alone (times the weight, if ``weighted``)."""
    return sum((WEIGHTS[n] if weighted else 1.0) * found[n] / base[n] for n in NAMES)


def speedup(record: FleetRecord) -> str:
    """Cores each pipeline used just before and a few seconds after the first departure."""
    if len(record.epochs) < 2:
        return "no departure recorded"
    first, second = record.epochs[0], record.epochs[1]
    moved = ", ".join(f"{n} {first.cores_used.get(n, 0):.2f}->{second.cores_used[n]:.2f}"
                      for n in second.running)
    return f"after {record.decisions[1].reason}: cores {moved}"


def prepare(items: int, address: str = "") -> Path:
    """A folder with the examples' pipelines and inputs, each profiled and planned alone,
    and the jobs file naming those profiles.  With a Ray cluster's ``address``, every plan
    is for that cluster's nodes (`fitwork fleet ray`), not this host's."""
    cwd = Path(tempfile.mkdtemp(prefix="fleet-host-"))
    fleet: tuple[str, ...] = ()
    if address:
        fitwork("fleet", "ray", "--ray-address", address, "-o", "fleet.yaml", cwd=cwd)
        fleet = ("--fleet", "fleet.yaml")
    for name in (*(f"{n}.py" for n in NAMES), "make_inputs.py", "jobs.yaml"):
        shutil.copy(EXAMPLES / name, cwd / name)
    subprocess.run([sys.executable, "make_inputs.py", str(items)], cwd=cwd, check=True)
    text = (cwd / "jobs.yaml").read_text()
    for name in NAMES:
        ref = "tokens:pipeline" if name == "tokens" else f"{name}.py:pipeline"
        fitwork("profile", ref, "--input", f"{name}.jsonl", "-o", f"{name}.profile.json",
                cwd=cwd)
        fitwork("plan", ref, "--profile", f"{name}.profile.json", "-o", f"{name}.plan.json",
                *fleet, cwd=cwd)
        text = text.replace(f"output: out/{name}.jsonl",
                            f"output: out/{name}.jsonl\n    profile: {name}.profile.json")
    (cwd / "jobs.yaml").write_text(text)
    return cwd


def trials(cwd: Path, count: int) -> tuple[dict[str, list[dict[str, float]]], list[FleetRecord]]:
    """Every contender ``count`` times, alternating its order: rates per run, fleet records."""
    rows: dict[str, list[dict[str, float]]] = {"alone": [], "status quo": [], "fitwork": []}
    records = []
    for trial in range(count):
        order = ["alone", "status quo", "fitwork"] if trial % 2 == 0 else \
            ["fitwork", "status quo", "alone"]
        for which in order:
            if which == "alone":
                rows["alone"].append(alone(cwd, trial))
            elif which == "status quo":
                rows["status quo"].append(status_quo(cwd, trial))
            else:
                found, record = fleet(cwd, trial)
                rows["fitwork"].append(found)
                records.append(record)
    return rows, records


def print_rates(rows: dict[str, list[dict[str, float]]]) -> None:
    """Each contender's rates and aggregate normalised throughput, and fitwork's ratio."""
    base = {n: statistics.median(r[n] for r in rows["alone"]) for n in NAMES}
    print(f"{'contender':<12}" + "".join(f"{n + ' items/s':>20}" for n in NAMES)
          + f"{'sum rate/alone':>16}{'weighted':>10}")
    for which, found in rows.items():
        cells = "".join(f"{statistics.median(r[n] for r in found):>20,.1f}" for n in NAMES)
        sums = [normalised(r, base, False) for r in found]
        weighted = [normalised(r, base, True) for r in found]
        each = ", ".join(f"{s:.2f}" for s in sums)
        print(f"{which:<12}{cells}{statistics.median(sums):>16.2f}"
              f"{statistics.median(weighted):>10.2f}   trials {each}")
    quo = statistics.median(normalised(r, base, False) for r in rows["status quo"])
    ours = statistics.median(normalised(r, base, False) for r in rows["fitwork"])
    ratio = f"{ours / quo:.2f}x" if quo > 0 else "- (the status quo did nothing)"
    print(f"fitwork / status quo, aggregate normalised throughput: {ratio} (aim >= 1.2x)")
    print_ceiling(rows, base, quo)
    for failed in FAILED:
        print(f"failed, counted as 0 items/s: {failed}")


def print_ceiling(rows: dict[str, list[dict[str, float]]], base: dict[str, float],
                  quo: float) -> None:
    """What any split of the cores can reach, from the status quo's own figures, where the
    cores are all the pipelines share and each keeps its CPU per item: the status quo's
    unweighted sum is the host's capacity in alone-rates, so a split moves the sum only by
    what start-up and oversubscription waste, and the weighted sum at most to the
    capacity's share in proportion to the weights (the fair plan's)."""
    if quo <= 0:
        return
    quo_weighted = statistics.median(normalised(r, base, True) for r in rows["status quo"])
    weights = [WEIGHTS[n] for n in NAMES]
    fair = quo * sum(w * w for w in weights) / sum(weights)
    print(f"ceiling where the cores are all that is shared: unweighted 1.00x (any split sums "
          f"to the status quo's {quo:.2f}); weighted, shares by weight, {fair:.2f} / "
          f"{quo_weighted:.2f} = {fair / quo_weighted:.2f}x")


def print_plan_held(cwd: Path, plan: FleetPlan, records: list[FleetRecord]) -> None:
    """Per pipeline, its planned rate against what it realized while all three ran; per
    trial, the shares then, the cores gained at the first departure, the busiest stretch."""
    for j in plan.jobs:
        for warm in (False, True):
            got = [g for record in records
                   if (g := epoch_rate(cwd, record, j.name, warm)) is not None]
            when = "past start-up" if warm else "from the start"
            if not got:
                print(f"{j.name}: no stretch with all three running ({when}) long enough "
                      "to measure")
                continue
            inside = sum(j.rate_low <= g <= j.rate_high for g in got)
            print(f"{j.name}: planned {j.rate:,.1f} items/s ({j.rate_low:,.1f}-"
                  f"{j.rate_high:,.1f}) while all three run; realized {when} "
                  f"{', '.join(f'{g:,.1f}' for g in got)} ({inside}/{len(got)} inside the "
                  f"range; {', '.join(f'{g / j.rate:.2f}x' for g in got)} the plan)")
    for i, record in enumerate(records):
        firsts = {n: first_output(cwd, record, n) for n in NAMES}
        print(f"trial {i}: first output at " + ", ".join(
            f"{n} {t:.1f} s" for n, t in firsts.items() if t is not None)
            + " of the fleet run")
    print_cpu_per_item(cwd, records)
    print_shares(cwd, records)
    for i, record in enumerate(records):
        print(f"trial {i}: {speedup(record)}")
        if record.share_control is not None:
            print(f"trial {i}: shares held by the {record.share_control.lever} lever, "
                  f"corrections {record.share_control.corrections}")
        if record.epochs:
            busiest = max(record.epochs, key=lambda e: e.realized_utilization)
            print(f"trial {i}: the busiest epoch used {busiest.realized_utilization:.0%} of "
                  f"the host's cores (predicted {busiest.predicted_utilization or 0:.0%})")


def worker_cpu(record: RunRecord) -> float:
    """The workers' CPU seconds per source item of one run (the drivers' left out)."""
    return sum(w.cpu_s for w in record.workers) / max(record.items_in, 1)


def print_cpu_per_item(cwd: Path, records: list[FleetRecord]) -> None:
    """Per pipeline, its workers' CPU per item alone and in the fleet runs: a pipeline that
    holds its planned share of the cores yet falls short of its planned rate spends more CPU
    on each item beside the others than alone."""
    for name in NAMES:
        lone = [worker_cpu(RunRecord.load(path)) for path in
                sorted(cwd.glob(f"out-alone*/{name}.jsonl.record.json"))]
        together = [worker_cpu(own) for record in records
                    if (own := own_record(cwd, record, name)) is not None]
        if lone and together:
            print(f"{name}: workers' CPU per item alone {statistics.median(lone) * 1e3:.2f} ms, "
                  f"in the fleet runs {statistics.median(together) * 1e3:.2f} ms "
                  f"({statistics.median(together) / statistics.median(lone):.2f}x)")


def print_shares(cwd: Path, records: list[FleetRecord]) -> None:
    """Per trial and pipeline, while all three ran: planned share, realized ÷ planned as
    sampled (local), the controller's target ÷ planned, and realized ÷ planned from the
    pipeline's own record."""
    print("shares while all three run: realized / planned (aim 0.90-1.10)")
    print(f"{'trial':<6}{'pipeline':<10}{'planned':>8}{'sampled':>9}{'target':>8}"
          f"{'records':>9}")
    held = checked = 0
    for i, record in enumerate(records):
        planned = planned_shares(record)
        epochs = [e for e in record.epochs if len(e.running) == 3]
        main = max(epochs, key=lambda e: e.end_s - e.start_s) if epochs else None
        estimated = record_shares(cwd, record)
        for name in NAMES:
            if name not in planned:
                continue
            cells = []
            sampled = main.realized_share.get(name) if main else None
            target = main.target_share.get(name) if main else None
            for value in (sampled, target, estimated.get(name)):
                cells.append(f"{value / planned[name]:.2f}x" if value else "-")
            measured = sampled if sampled is not None else estimated.get(name)
            if measured is not None:
                checked += 1
                held += abs(measured / planned[name] - 1) <= 0.10
            print(f"{i:<6}{name:<10}{planned[name]:>8.0%}{cells[0]:>9}{cells[1]:>8}"
                  f"{cells[2]:>9}")
    print(f"{held}/{checked} inside ±10% of the plan (sampled where sampled, else from "
          "records; records count the workers' CPU, not the drivers')")


def _cluster_processes(token: str) -> list[int]:
    """This host's processes with ``token`` in their environment: this cluster's, found
    without reading any command line (Ray's processes retitle themselves)."""
    mark = f"RAY_AUTH_TOKEN={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if mark in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
    return found


@contextlib.contextmanager
def two_nodes() -> Iterator[str]:
    """A Ray head and one worker node on this host (one CPU, an 80 MB object store and a
    temp dir each, token authentication with a fresh token); its address.  Every `fitwork`
    started here meanwhile joins it with that token."""
    token = secrets.token_hex(32)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    os.environ.pop("RAY_ADDRESS", None)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ray = str(Path(sys.executable).with_name("ray"))
    common = ["--num-cpus=1", "--object-store-memory=80000000", "--disable-usage-stats",
              "--node-ip-address=127.0.0.1"]
    try:
        for first in (True, False):
            where = ["--head", f"--port={port}", "--include-dashboard=false"] if first \
                else [f"--address=127.0.0.1:{port}"]
            temp = tempfile.mkdtemp(prefix="fwh-" if first else "fww-")  # short: socket paths
            done = subprocess.run([ray, "start", *where, f"--temp-dir={temp}", *common],
                                  capture_output=True, text=True, timeout=180)
            if done.returncode != 0:
                raise SystemExit(f"ray start failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
        yield f"127.0.0.1:{port}"
    finally:
        for _ in range(3):
            for pid in _cluster_processes(token):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=6000)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--engine", choices=("local", "ray"), default="local")
    args = parser.parse_args()
    began = time.perf_counter()
    load = os.getloadavg()[0]
    with two_nodes() if args.engine == "ray" else contextlib.nullcontext("") as address:
        cwd = prepare(args.items, address)
        fleet = ("--fleet", "fleet.yaml") if address else ()
        planned = fitwork("plan", "--jobs", "jobs.yaml", "-o", "fleet.json", *fleet, cwd=cwd)
        print(planned.stdout)
        if address:
            ENGINE.extend(["--engine", "ray", "--ray-address", address])
            print(f"a Ray cluster of two nodes on this host at {address} (1 CPU each), "
                  "every plan made for its nodes (fitwork fleet ray)")
        rows, records = trials(cwd, args.trials)
    print(f"{args.items:,} items per pipeline (tokens: half, 6 sentences each), "
          f"{args.trials} trials alternating on --engine {args.engine}, "
          f"{time.perf_counter() - began:.0f} s in all; host {os.cpu_count()} cores, load "
          f"average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print_rates(rows)
    print_plan_held(cwd, FleetPlan.load(cwd / "fleet.json"), records)


if __name__ == "__main__":
    main()
