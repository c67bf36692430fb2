"""Many pipelines on this host: a fleet plan against each pipeline planned alone, run at once.

The three pipelines of ``examples/jobs`` (weights 2:1:1) are profiled once and planned two
ways: each alone with `fitwork plan` (the status quo: every team plans the whole host for
itself) and together with `fitwork plan --jobs` (fair).  Then, alternating, ``--trials``
times each: every pipeline alone with its own plan (what it gets owning the host, the
normaliser), the three alone-plans started at once (status quo), and `fitwork run --jobs
--plan` (fitwork).  A pipeline's rate is its items over its own wall time; the aggregate
normalised throughput is the sum over pipelines of rate ÷ its rate alone, the weighted one
weighs each by its weight.  From the fleet record: each pipeline's realized share of the
cores against its planned share while all three run, and how the others' cores grew once the
first finished (the re-fit).  Everything through the CLI, in subprocesses, as a user runs it.

    python bench/fleet_host.py [--items 6000] [--trials 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fitwork.jobs.plan import FleetPlan
from fitwork.jobs.record import FleetRecord
from fitwork.telemetry.record import RunRecord

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "jobs"
NAMES = ("scoring", "tokens", "lookup")
WEIGHTS = {"scoring": 2.0, "tokens": 1.0, "lookup": 1.0}


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
    return subprocess.Popen(
        [sys.executable, "-m", "fitwork", "run", ref, "--input", f"{name}.jsonl",
         "--output", f"out-{tag}/{name}.jsonl", "--plan", f"{name}.plan.json", "--quiet",
         "--record", f"out-{tag}/{name}.jsonl.record.json", "--no-journal"],
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(cwd)})


def rates(cwd: Path, tag: str) -> dict[str, float]:
    """Each pipeline's items over its own wall time, from its run record."""
    found = {}
    for name in NAMES:
        record = RunRecord.load(cwd / f"out-{tag}" / f"{name}.jsonl.record.json")
        found[name] = record.items_in / record.wall_s
    return found


def alone(cwd: Path, trial: int) -> dict[str, float]:
    """Each pipeline alone on the host with its own plan."""
    tag = f"alone{trial}"
    for name in NAMES:
        start(name, cwd, tag).wait()
    return rates(cwd, tag)


def status_quo(cwd: Path, trial: int) -> dict[str, float]:
    """The three alone plans started at once."""
    tag = f"quo{trial}"
    for p in [start(name, cwd, tag) for name in NAMES]:
        p.wait()
    return rates(cwd, tag)


def fleet(cwd: Path, trial: int) -> tuple[dict[str, float], FleetRecord]:
    """`fitwork run --jobs --plan`: the fleet plan, re-fitted as pipelines finish."""
    tag = f"fleet{trial}"
    jobs = (cwd / "jobs.yaml").read_text().replace("out/", f"out-{tag}/")
    (cwd / f"jobs-{tag}.yaml").write_text(jobs)
    fitwork("run", "--jobs", f"jobs-{tag}.yaml", "--plan", "fleet.json", "--fleet-record",
            f"{tag}.json", cwd=cwd)
    return rates(cwd, tag), FleetRecord.load(cwd / f"{tag}.json")


def epoch_rate(cwd: Path, record: FleetRecord, name: str) -> float | None:
    """``name``'s source items/s while all three ran (the longest such stretch), from its
    own run record's completions placed on the fleet run's clock."""
    together = [e for e in record.epochs if len(e.running) == 3]
    outcome = next(o for o in record.jobs if o.name == name)
    if not together or outcome.record is None:
        return None
    main = max(together, key=lambda e: e.end_s - e.start_s)
    own = RunRecord.load(cwd / outcome.record if not Path(outcome.record).is_absolute()
                         else outcome.record)
    offset = own.started_at - record.started_at
    points = list(zip(own.completions.times_s, own.completions.completed, strict=True))

    def done_at(at: float) -> float:
        before = [c for t, c in points if t + offset <= at]
        return float(before[-1]) if before else 0.0

    span = main.end_s - main.start_s
    return (done_at(main.end_s) - done_at(main.start_s)) / span if span > 1.0 else None


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


def prepare(items: int) -> Path:
    """A folder with the examples' pipelines and inputs, each profiled and planned alone,
    and the jobs file naming those profiles."""
    cwd = Path(tempfile.mkdtemp(prefix="fleet-host-"))
    for name in (*(f"{n}.py" for n in NAMES), "make_inputs.py", "jobs.yaml"):
        shutil.copy(EXAMPLES / name, cwd / name)
    subprocess.run([sys.executable, "make_inputs.py", str(items)], cwd=cwd, check=True)
    text = (cwd / "jobs.yaml").read_text()
    for name in NAMES:
        ref = "tokens:pipeline" if name == "tokens" else f"{name}.py:pipeline"
        fitwork("profile", ref, "--input", f"{name}.jsonl", "-o", f"{name}.profile.json",
                cwd=cwd)
        fitwork("plan", ref, "--profile", f"{name}.profile.json", "-o", f"{name}.plan.json",
                cwd=cwd)
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
    print(f"fitwork / status quo, aggregate normalised throughput: {ours / quo:.2f}x "
          "(aim >= 1.2x)")


def print_plan_held(cwd: Path, plan: FleetPlan, records: list[FleetRecord]) -> None:
    """Per pipeline, its planned rate against what it realized while all three ran; per
    trial, the shares then, the cores gained at the first departure, the busiest stretch."""
    for j in plan.jobs:
        got = [g for record in records if (g := epoch_rate(cwd, record, j.name)) is not None]
        if not got:
            print(f"{j.name}: no stretch with all three running long enough to measure")
            continue
        inside = sum(j.rate_low <= g <= j.rate_high for g in got)
        print(f"{j.name}: planned {j.rate:,.1f} items/s ({j.rate_low:,.1f}-{j.rate_high:,.1f}) "
              f"while all three run; realized {', '.join(f'{g:,.1f}' for g in got)} in that "
              f"stretch ({inside}/{len(got)} inside the range; "
              f"{', '.join(f'{g / j.rate:.2f}x' for g in got)} the plan)")
    for i, record in enumerate(records):
        together = [e for e in record.epochs if len(e.running) == 3]
        for e in together[:1]:
            shares = ", ".join(f"{n} {e.realized_share[n]:.0%} vs {e.planned_share.get(n, 0):.0%}"
                               f" ({e.share_ratio(n):.2f}x)" for n in e.running)
            print(f"trial {i}: shares while all three run (realized vs planned): {shares}")
        print(f"trial {i}: {speedup(record)}")
        busiest = max(record.epochs, key=lambda e: e.realized_utilization)
        print(f"trial {i}: the busiest epoch used {busiest.realized_utilization:.0%} of the "
              f"host's cores (predicted {busiest.predicted_utilization or 0:.0%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=6000)
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args()
    began = time.perf_counter()
    cwd = prepare(args.items)
    planned = fitwork("plan", "--jobs", "jobs.yaml", "-o", "fleet.json", cwd=cwd)
    print(planned.stdout)
    rows, records = trials(cwd, args.trials)
    print(f"{args.items:,} items per pipeline (tokens: half, 6 sentences each), "
          f"{args.trials} trials alternating, {time.perf_counter() - began:.0f} s in all; "
          f"host {os.cpu_count()} cores")
    print_rates(rows)
    print_plan_held(cwd, FleetPlan.load(cwd / "fleet.json"), records)


if __name__ == "__main__":
    main()
