"""`fitwork run --jobs`: every pipeline of a jobs file at once, on one host or one Ray cluster.

Each pipeline runs as its own `fitwork run` process, so its output, journal, dead letters,
record and exit status are its own, and a crash, a poison row or a bad input in one touches
no other.  This coordinator starts each at its ``start_after``, watches them, and on every
arrival and departure re-fits the fleet plan over the pipelines then running
(`fitwork.jobs.plan.refit`) and moves replicas to them live through their control files
(`fitwork.jobs.control`), recording each decision with its reason.  Each pipeline runs in a
session of its own, and on the local engines a feedback controller (`fitwork.jobs.shares`)
holds each to its planned share of the cores (unplanned: to the pipelines' weights) while
they contend, a share one leaves unused going to the others (each runs as many replicas as
its own plan alone would, so it can take up such a share; `_burst`); it moves each session's
scheduler weight (its autogroup nice level, no privilege needed) or, where that is not in
effect, stops an over-consumer's process group for part of each period.  Each pipeline also
starts at the nice level that weighs one of its processes as the cores the plan gives one of
its replicas (a prior; raising a level needs no privilege).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

from fitwork.errors import InputError
from fitwork.jobs.control import write_control
from fitwork.jobs.plan import FleetPlan, Refit, refit
from fitwork.jobs.record import Decision, FleetRecord, JobOutcome, Sample, ShareControl
from fitwork.jobs.shares import ShareController, choose_lever
from fitwork.jobs.spec import Job, JobsFile
from fitwork.telemetry.record import RunRecord

__all__ = ["run_many"]

SAMPLE_S = 0.5
"""How often the coordinator reads each pipeline's processes' CPU time (the shares)."""
STOP_S = 30.0
"""How long an interrupted pipeline may take to close its outputs before it is killed."""
NICE_STEP = 1.25
"""CFS weighs a process 1.25x per nice level: one level per 1.25x of weight."""


@dataclass
class _Running:
    """One pipeline's process and what the coordinator knows of it."""

    job: Job
    process: subprocess.Popen[bytes]
    control: Path
    started: float
    log: Any
    cpu: float = 0.0
    seq: int = 0
    ended: float | None = None
    tree: dict[int, psutil.Process] = field(default_factory=dict)
    live: list[int] = field(default_factory=list)

    def cpu_seconds(self) -> float:
        """CPU seconds its process and every live descendant have used (and the exited
        ones it waited for)."""
        try:
            root = self.tree.setdefault(self.process.pid, psutil.Process(self.process.pid))
            total = _cpu(root, children=True)
            live = [root.pid]
            for child in root.children(recursive=True):
                total += _cpu(self.tree.setdefault(child.pid, child))
                live.append(child.pid)
            self.live = live
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return self.cpu
        self.cpu = max(self.cpu, total)
        return self.cpu


def _cpu(process: psutil.Process, children: bool = False) -> float:
    try:
        t = process.cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
    return t.user + t.system + ((t.children_user + t.children_system) if children else 0.0)


def run_many(jobs: JobsFile, plan: FleetPlan | None = None, *, engine: str = "local",
             resume: bool = False, ray_address: str | None = None,
             say: Callable[[str], None] | None = None,
             workdir: Path | None = None) -> FleetRecord:
    """Run every job of ``jobs`` at once and return the fleet record when the last ends.

    With ``plan`` (a `FleetPlan` for the same jobs), each admitted job runs with its share
    of the plan and re-fits move replicas between them as they arrive and finish; queued
    jobs start once a re-fit admits them; rejected jobs do not run.  ``resume`` continues
    each job from its journal.
    """
    say = say or (lambda line: print(line, file=sys.stderr))
    own = workdir or Path(tempfile.mkdtemp(prefix="fitwork-jobs-"))
    fleet = _Fleet(jobs, plan, engine, resume, ray_address, say, own)
    return fleet.go()


class _Fleet:
    """The coordinator's state: what runs, what waits, the samples and the decisions."""

    def __init__(self, jobs: JobsFile, plan: FleetPlan | None, engine: str, resume: bool,
                 ray_address: str | None, say: Callable[[str], None], workdir: Path) -> None:
        self.jobs, self.plan, self.engine, self.resume = jobs, plan, engine, resume
        self.ray_address, self.say, self.workdir = ray_address, say, workdir
        self.running: dict[str, _Running] = {}
        self.done: dict[str, JobOutcome] = {}
        self.decisions: list[Decision] = []
        self.samples: list[Sample] = []
        self.clock = time.monotonic
        self.t0 = self.clock()
        self.wall0 = time.time()
        self.planned: dict[str, dict[str, int]] = {}
        self.rates: dict[str, float] = {}
        self.cores: dict[str, float] = {}
        self.levels: dict[str, int] = {} if plan is not None else _levels(
            {j.name: j.weight for j in jobs.jobs})
        self.waiting = [j for j in jobs.jobs if self._status(j) != "rejected"]
        self.seen: set[str] = set()  # waiting jobs whose start_after has come
        self.refitted: Refit | None = None
        lever = choose_lever() if engine != "ray" else None
        self.control = ShareController(lever) if lever is not None else None
        for j in jobs.jobs:
            if self._status(j) == "rejected":
                assert plan is not None
                reason = plan.job(j.name).reason or "rejected by the plan"
                self.say(f"{j.name}: rejected, not run: {reason}")
                self.done[j.name] = JobOutcome(name=j.name, team=j.team, status="rejected",
                                               exit_code=None, reason=reason)

    def _status(self, job: Job) -> str:
        return "admitted" if self.plan is None else self.plan.job(job.name).status

    def go(self) -> FleetRecord:
        """Start, watch and re-fit until every job has ended; the fleet record."""
        last_sample = self.clock()
        try:
            while self.waiting or self.running:
                now = self.clock() - self.t0
                arrived = [j for j in self.waiting
                           if j.start_after <= now and j.name not in self.seen]
                self.seen.update(j.name for j in arrived)
                ended = [r for r in self.running.values() if r.process.poll() is not None]
                for r in ended:
                    self._ended(r)
                if arrived or ended:
                    self._decide(arrived, [r.job.name for r in ended])
                if self.clock() - last_sample >= SAMPLE_S:
                    self._sample()
                    last_sample = self.clock()
                time.sleep(0.05)
        finally:
            if self.control is not None:
                self.control.close()  # every process group continued before it is stopped
            self._stop_all()
        self._sample()
        control = None if self.control is None else ShareControl(
            lever=self.control.lever.name, corrections=dict(self.control.corrections))
        return FleetRecord.build(self.jobs, self.plan, list(self.done.values()),
                                 self.decisions, self.samples if self.engine == "local" else [],
                                 psutil.cpu_count() or 1, self.engine, self.wall0,
                                 share_control=control)

    def _stop_all(self) -> None:
        """Interrupted: stop every pipeline still running as Ctrl-C stops one (its outputs
        closed, its journal kept for --resume), and wait for each."""
        for r in self.running.values():
            with contextlib.suppress(ProcessLookupError):
                r.process.send_signal(signal.SIGTERM)
        for r in list(self.running.values()):
            try:
                r.process.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                r.process.kill()
                r.process.wait()
            self.say(f"{r.job.name}: stopped; `fitwork run --jobs ... --resume` continues it")
            r.log.close()

    def _decide(self, arrived: list[Job], ended: list[str]) -> None:
        """Re-fit over the running and arriving jobs (with a plan) and start the arrivals
        the plan admits; record the decision and its reason."""
        reason = "; ".join([*(f"{j.name} arrived" for j in arrived),
                            *(f"{n} finished" for n in ended)])
        candidates = [*self.running, *(j.name for j in self.waiting if j.name in self.seen)]
        admitted, started, fitted = candidates, 0.0, None
        if self.plan is not None:
            began = time.perf_counter()
            fitted = refit(self.plan, candidates)
            started = time.perf_counter() - began
            self.refitted = fitted
            admitted = [n for n in candidates if fitted.admitted(n)]
            self.planned = {n: self._burst(n, fitted.replicas(n)) for n in admitted}
            self.rates = {n: fitted.rate(n) for n in admitted}
            self.cores = {n: fitted.cores(n) for n in admitted}
            self.levels = _levels({n: self.cores[n] / max(1, sum(self.planned[n].values()))
                                   for n in admitted})
        for name, r in self.running.items():
            if name in self.planned:
                r.seq += 1
                write_control(r.control, r.seq, self.planned[name])
        for j in list(self.waiting):
            if j.name not in admitted and j.name in self.seen and fitted is not None:
                why = fitted.reason(j.name)
                if not self.running and not any(n in admitted for n in candidates):
                    self.waiting.remove(j)  # alone on the fleet and still not admitted
                    self.say(f"{j.name}: not admitted even alone: {why}")
                    self.done[j.name] = JobOutcome(name=j.name, team=j.team,
                                                   status="rejected", exit_code=None,
                                                   reason=why)
                elif j in arrived:
                    self.say(f"{j.name}: queued: {why}")
            if j.name in admitted:
                self.waiting.remove(j)
                if self.resume and _complete(j):
                    code, why = _ended_before(j)
                    self.say(f"{j.name}: already complete ({j.output} and no journal left); "
                             f"not run again; {why}")
                    self.done[j.name] = JobOutcome(
                        name=j.name, team=j.team, status="succeeded" if code == 0 else "failed",
                        exit_code=code, reason=f"already complete; {why}",
                        record=str(j.record_path))
                    continue
                self._start(j)
        self.decisions.append(Decision(
            at_s=self.clock() - self.t0, reason=reason, running=sorted(self.running),
            replicas={n: dict(v) for n, v in self.planned.items() if n in self.running},
            rates={n: v for n, v in self.rates.items() if n in self.running},
            cores={n: v for n, v in self.cores.items() if n in self.running},
            solve_s=started))
        if self.plan is not None and self.decisions[-1].replicas:
            moved = ", ".join(f"{n} {_counts(v)}" for n, v in
                              sorted(self.decisions[-1].replicas.items()))
            self.say(f"re-fit ({reason}): {moved}")

    def _burst(self, name: str, planned: dict[str, int]) -> dict[str, int]:
        """The replicas ``name`` runs: where the share controller holds each pipeline to
        its planned share of the cores, as many as its own plan alone would run (each unit
        at least the co-fit's), so a share another pipeline leaves unused, or frees before
        the re-fit, is used (the scheduler's weights divide the cores only while they are
        contended); without the controller, the co-fit's."""
        if self.control is None or self.plan is None:
            return planned
        alone: dict[str, int] = {}
        for group in self.plan.job(name).plan.fitted.result.replicas:
            alone[group.unit] = alone.get(group.unit, 0) + group.replicas
        return {u: max(n, alone.get(u, 0)) for u, n in planned.items()}

    def _start(self, job: Job) -> None:
        """Start ``job``'s own `fitwork run` process."""
        control = self.workdir / f"{job.name}.control.json"
        command = [sys.executable, "-m", "fitwork", "run", job.pipeline,
                   "--input", str(job.input), "--output", str(job.output),
                   "--dead-letter", str(job.dead_letters), "--record", str(job.record_path),
                   "--engine", self.engine, "--quiet", "--control", str(control)]
        if self.resume and _journal(job).exists():
            command.append("--resume")
        if self.engine == "ray" and self.ray_address:
            command += ["--ray-address", self.ray_address]
        nice = self.levels.get(job.name, 0)
        if self.plan is not None:
            job_plan = self.workdir / f"{job.name}.plan.json"
            self.plan.job_plan(job.name, self.refitted).save(job_plan)
            command += ["--plan", str(job_plan)]
            write_control(control, 0, self.planned.get(job.name, {}))
        job.output.parent.mkdir(parents=True, exist_ok=True)
        log = job.output.with_name(job.output.name + ".log").open("wb")
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=str(self.jobs.path.resolve().parent if self.jobs.path else Path.cwd()),
            env=_env(self.jobs), preexec_fn=(lambda: os.nice(nice)) if nice else None,
            start_new_session=True)  # its own session: its own scheduler group and signals
        self.running[job.name] = _Running(job, process, control, self.clock() - self.t0, log)
        if self.control is not None:
            self.control.add(job.name, process.pid, self._prior(job.name))
        self.say(f"{job.name}: started (pid {process.pid}"
                 f"{f', nice {nice}' if nice else ''}); log in {log.name}")

    def _prior(self, name: str) -> float:
        """``name``'s first weight for the share controller: its planned cores (unplanned:
        its weight) over the most any admitted pipeline has."""
        shares = self.cores if self.plan is not None else \
            {j.name: j.weight for j in self.jobs.jobs}
        top, own = max(shares.values(), default=0.0), shares.get(name, 0.0)
        return own / top if top > 0 and own > 0 else 1.0  # none planned: not held back

    def _ended(self, r: _Running) -> None:
        r.cpu_seconds()
        if self.control is not None:
            self.control.remove(r.job.name)
        r.ended = self.clock() - self.t0
        r.log.close()
        del self.running[r.job.name]
        code = r.process.returncode
        status: Literal["succeeded", "failed"] = "succeeded" if code == 0 else "failed"
        tail = "" if code == 0 else f": {_why(code, Path(r.log.name))}"
        self.say(f"{r.job.name}: {status} (exit {code}) after {r.ended - r.started:.1f} s"
                 f"{tail}")
        self.done[r.job.name] = JobOutcome(
            name=r.job.name, team=r.job.team, status=status, exit_code=code,
            started_s=r.started, ended_s=r.ended, cpu_s=r.cpu,
            reason=None if code == 0 else tail.lstrip(": "),
            record=str(r.job.record_path))

    def _sample(self) -> None:
        """One reading of every running pipeline's CPU seconds so far."""
        if not self.running:
            return
        now = self.clock() - self.t0
        cpu, read_at = {}, {}
        for n, r in self.running.items():  # each stamped as read: reading them takes time
            cpu[n] = r.cpu_seconds()
            read_at[n] = round(self.clock() - self.t0, 4)
        planned = {n: self.cores[n] for n in self.running if n in self.cores} \
            if self.plan is not None else {n: float(r.job.weight)
                                           for n, r in self.running.items()}
        wanted = {} if self.control is None else self.control.step(
            now, cpu, {n: r.live for n, r in self.running.items()}, planned)
        self.samples.append(Sample(
            at_s=now, cpu_s=cpu, read_at_s=read_at,
            planned_cores={n: self.cores[n] for n in self.running if n in self.cores},
            target_share={n: round(v, 4) for n, v in wanted.items()}))


def _journal(job: Job) -> Path:
    """Where `fitwork run` journals ``job`` (its default, beside the output)."""
    return job.output.with_name(job.output.name + ".journal")


def _ended_before(job: Job) -> tuple[int, str]:
    """The exit status ``job``'s earlier run ended with, as its record tells (1 where items
    failed, as `fitwork run` exits), and why in a few words."""
    try:
        record = RunRecord.load(job.record_path)
    except InputError as exc:  # none, or one this version cannot read: not known
        return 0, f"its earlier run's record is not readable ({exc})"
    if record.status != "completed":
        return 1, f"its earlier run ended {record.status}"
    if record.failures:
        return 1, (f"{record.failures} item(s) failed in its earlier run "
                   f"(dead letters in {record.dead_letter or job.dead_letters})")
    return 0, "its earlier run succeeded"


def _complete(job: Job) -> bool:
    """Whether ``job`` ran to its end before: its output is there and no journal is left."""
    return job.output.exists() and not _journal(job).exists()


def _counts(replicas: dict[str, int]) -> str:
    return "(" + ", ".join(f"{u}={n}" for u, n in replicas.items()) + ")"


def _levels(weights: dict[str, float]) -> dict[str, int]:
    """The nice level per pipeline that weighs its processes as ``weights`` (the heaviest
    at 0, a lighter one a level per 1.25x lighter)."""
    heaviest = max(weights.values(), default=0.0)
    if heaviest <= 0:
        return {n: 0 for n in weights}
    return {n: min(19, max(0, round(math.log(heaviest / max(w, heaviest * 1e-6))
                                    / math.log(NICE_STEP)))) for n, w in weights.items()}


def _env(jobs: JobsFile) -> dict[str, str]:
    """The children's environment: this one, with the jobs file's folder importable (a job
    may name a module that sits beside it)."""
    env = dict(os.environ)
    base = str(jobs.path.resolve().parent) if jobs.path else os.getcwd()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (base, env.get("PYTHONPATH")) if p)
    return env


def _why(code: int, log: Path) -> str:
    """Why a pipeline's process ended with ``code``: the signal that killed it, or the last
    line it wrote (its error)."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"its process was killed by {signal.Signals(-code).name}"
    return _last_line(log)


def _last_line(log: Path) -> str:
    """The last non-empty line a pipeline's process wrote (its error, if it failed)."""
    with contextlib.suppress(OSError):
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines()
                 if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("error:")]
        if errors or lines:  # fitwork's own error line, else whatever came last
            return (errors or lines)[-1][:300]
    return "no output"
