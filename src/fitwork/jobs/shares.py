"""Holding each pipeline of a `fitwork run --jobs` to its planned share of the host's cores.

A feedback controller.  Every sample (`fitwork.jobs.run.SAMPLE_S`) it reads, over the last
second or so, each pipeline's CPU use (cores) and DEMAND: the time its threads ran plus the
time they sat runnable on a run queue (``/proc/PID/task/TID/schedstat``), i.e. the cores it
would use if nothing stood in its way.  Its TARGET is its planned share renormalised over
the pipelines that are CPU-hungry (water-filling: a pipeline whose demand is under its
proportional part gets its demand, and the rest is split by planned share among the others),
so an I/O-bound pipeline is never throttled below what it uses and what it leaves goes to
the others in proportion to their plans.  Each hungry pipeline's weight is then moved by
(target ÷ realized share) to a power (`GAIN`), and the weights go to a LEVER:

- ``autogroup`` (used where it is in effect): each pipeline runs in its own session, so the
  kernel's scheduler weighs it as one group (CONFIG_SCHED_AUTOGROUP), and the controller
  writes the group's nice level to ``/proc/PID/autogroup``.  Any user may set levels 0-19
  there, up as well as down, without privilege (only below 0 needs CAP_SYS_NICE); one write
  per 100 ms is the kernel's limit for unprivileged writers, so a refused write is retried
  at the next sample.  A level is 1.25x of weight: the fraction between two levels is carried
  over (error diffusion), so the time-average weight is the controller's.
- ``duty`` (the fallback, where autogroups are off or the processes sit in a cpu cgroup of
  their own): each throttled pipeline's process group is stopped (SIGSTOP) for the excess
  fraction of every `PERIOD_S` and continued (SIGCONT) for the rest; the heaviest runs free.
  Works for any process its user owns.

Neither lever ever gives a pipeline more cores than the host has: both only take away.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal, Protocol

__all__ = ["ShareController", "choose_lever", "targets"]

GAIN = 0.5
"""How much of the measured error one correction takes out (in log of the weight)."""
DEADBAND = 0.03
"""Share errors under this fraction of the target are left alone."""
WINDOW_S = 1.0
"""How far back the controller's readings of use and demand reach."""
PERIOD_S = 0.2
"""The duty lever's cycle: a throttled pipeline is stopped for part of each."""
NICE_STEP = 1.25
"""The scheduler weighs one nice level 1.25x (kernel/sched/core.c's sched_prio_to_weight)."""
LeverName = Literal["autogroup", "duty", "none"]


def targets(planned: Mapping[str, float], demand: Mapping[str, float],
            total: float) -> dict[str, float]:
    """Each pipeline's target share of ``total`` cores: its planned share, renormalised
    over those whose ``demand`` (cores) exceeds what that share gives them; the others get
    their demand."""
    left = {n: p for n, p in planned.items() if p > 0}
    cap, found = total, {}
    while left and cap > 0:
        weight = sum(left.values())
        sated = {n for n, p in left.items() if demand.get(n, math.inf) < cap * p / weight}
        if not sated:
            found.update({n: cap * p / weight for n, p in left.items()})
            break
        for n in sated:
            found[n] = demand[n]
            cap -= demand[n]
            del left[n]
    return {n: c / total for n, c in found.items()} if total > 0 else {}


def _schedstat(pids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """(ns run, ns waiting to run) per thread of ``pids``; empty where not readable."""
    found: dict[int, tuple[int, int]] = {}
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for task in os.scandir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    run, wait = Path(task.path, "schedstat").read_text().split()[:2]
                    found[int(task.name)] = (int(run), int(wait))
    return found


class Lever(Protocol):
    """What the controller moves: a weight per pipeline, the heaviest 1."""

    name: LeverName

    def add(self, name: str, pid: int) -> None: ...
    def remove(self, name: str) -> None: ...
    def apply(self, weights: Mapping[str, float]) -> set[str]: ...
    def running(self, name: str) -> float: ...
    def close(self) -> None: ...


class AutogroupLever:
    """Each pipeline's session is a scheduler group; its nice level is its weight."""

    name: LeverName = "autogroup"

    def __init__(self) -> None:
        self.pids: dict[str, int] = {}
        self.levels: dict[str, int] = {}
        self.carry: dict[str, float] = {}

    def add(self, name: str, pid: int) -> None:
        self.pids[name], self.levels[name], self.carry[name] = pid, 0, 0.0

    def remove(self, name: str) -> None:
        for table in (self.pids, self.levels, self.carry):
            table.pop(name, None)  # type: ignore[attr-defined]

    def apply(self, weights: Mapping[str, float]) -> set[str]:
        """Write each pipeline's level (its fraction carried); the pipelines changed."""
        changed = set()
        for name, weight in weights.items():
            if name not in self.pids:
                continue
            wanted = min(19.0, max(0.0, -math.log(max(weight, 1e-9)) / math.log(NICE_STEP)))
            level = min(19, max(0, round(wanted + self.carry[name])))
            if level != self.levels[name]:
                try:
                    Path(f"/proc/{self.pids[name]}/autogroup").write_text(str(level))
                except OSError:
                    continue  # gone, or the kernel's 100 ms limit: the next sample retries
                self.levels[name] = level
                changed.add(name)
            self.carry[name] += wanted - level
            self.carry[name] = max(-1.0, min(1.0, self.carry[name]))
        return changed

    def running(self, name: str) -> float:
        return 1.0

    def close(self) -> None:
        self.pids.clear()


class DutyLever:
    """Each throttled pipeline's process group stopped for part of every `PERIOD_S`."""

    name: LeverName = "duty"

    def __init__(self) -> None:
        self.groups: dict[str, int] = {}
        self.fractions: dict[str, float] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._cycle, name="fitwork-duty", daemon=True)
        self.thread.start()

    def add(self, name: str, pid: int) -> None:
        with self.lock:
            self.groups[name], self.fractions[name] = pid, 1.0

    def remove(self, name: str) -> None:
        with self.lock:
            group = self.groups.pop(name, None)
            self.fractions.pop(name, None)
        if group is not None:
            _signal(group, signal.SIGCONT)

    def apply(self, weights: Mapping[str, float]) -> set[str]:
        changed = set()
        with self.lock:
            for name, weight in weights.items():
                fraction = round(min(1.0, max(0.05, weight)), 2)
                if name in self.fractions and fraction != self.fractions[name]:
                    self.fractions[name] = fraction
                    changed.add(name)
        return changed

    def running(self, name: str) -> float:
        return self.fractions.get(name, 1.0)

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=2 * PERIOD_S)
        with self.lock:
            for group in self.groups.values():
                _signal(group, signal.SIGCONT)

    def _cycle(self) -> None:
        """Every period: continue all, then stop each throttled group at its fraction."""
        while not self.done.is_set():
            began = time.monotonic()
            with self.lock:
                plan = sorted((f, g) for g, f in zip(self.groups.values(),
                                                     self.fractions.values(), strict=True))
            for _, group in plan:
                _signal(group, signal.SIGCONT)
            for fraction, group in plan:
                if fraction >= 1.0:
                    continue
                if self.done.wait(max(0.0, began + fraction * PERIOD_S - time.monotonic())):
                    break
                _signal(group, signal.SIGSTOP)
            self.done.wait(max(0.0, began + PERIOD_S - time.monotonic()))
        with self.lock:
            for group in self.groups.values():
                _signal(group, signal.SIGCONT)


def _signal(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def autogroups_in_effect() -> bool:
    """Whether the scheduler weighs sessions as groups for processes started from here:
    autogroups on, and this process in the root cpu cgroup (autogroups apply only there)."""
    try:
        if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1":
            return False
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") and path != "/":
            return False
        if controllers == "" and path != "/":  # cgroup v2: cpu enabled where this sits?
            with contextlib.suppress(OSError):
                where = Path("/sys/fs/cgroup") / path.lstrip("/") / "cgroup.controllers"
                if "cpu" in where.read_text().split():
                    return False
    return True


def choose_lever(wanted: str | None = None) -> Lever | None:
    """``wanted`` (or FITWORK_SHARE_LEVER), else autogroup where in effect, else duty."""
    wanted = wanted or os.environ.get("FITWORK_SHARE_LEVER") or ""
    if wanted == "none":
        return None
    if wanted == "autogroup" or (not wanted and autogroups_in_effect()):
        return AutogroupLever()
    if wanted in ("", "duty"):
        return DutyLever()
    raise ValueError(f"FITWORK_SHARE_LEVER={wanted}: give autogroup, duty or none")


class ShareController:
    """Reads each pipeline's use and demand and moves its weight toward its target share."""

    def __init__(self, lever: Lever) -> None:
        self.lever = lever
        self.weights: dict[str, float] = {}
        self.readings: deque[tuple[float, dict[str, float], dict[str, dict[int, int]]]] = \
            deque()
        self.corrections: Counter[str] = Counter()
        self.last_targets: dict[str, float] = {}

    def add(self, name: str, pid: int, prior: float = 1.0) -> None:
        """A pipeline started, its process ``pid`` the leader of its session and group;
        ``prior`` its first weight (the heaviest 1), until its use is measured."""
        self.lever.add(name, pid)
        self.weights[name] = min(1.0, max(1e-3, prior))
        self._apply([name])

    def remove(self, name: str) -> None:
        """A pipeline ended: let its processes run."""
        self.lever.remove(name)
        self.weights.pop(name, None)

    def close(self) -> None:
        self.lever.close()

    def step(self, now: float, cpu_s: Mapping[str, float], pids: Mapping[str, list[int]],
             planned: Mapping[str, float]) -> dict[str, float]:
        """One correction from this reading (CPU seconds and live processes per pipeline);
        the target shares it steered to (empty until a window's readings are in)."""
        demand_ns = {n: {tid: run + wait for tid, (run, wait) in _schedstat(group).items()}
                     for n, group in pids.items()}
        stats = any(demand_ns.values())
        self.readings.append((now, dict(cpu_s), demand_ns))
        while len(self.readings) > 2 and now - self.readings[1][0] >= WINDOW_S:
            self.readings.popleft()
        then, cpu0, demand0 = self.readings[0]
        span = now - then
        live = [n for n in cpu_s if n in self.weights and n in cpu0 and planned.get(n, 0) > 0]
        if span <= 0 or len(live) < 2:
            if len(live) < 2:  # alone (or none measured yet): nobody to share with
                self.weights.update({n: 1.0 for n in self.weights})
                self._apply(list(self.weights))
            self.last_targets = {}
            return {}
        used = {n: max(0.0, cpu_s[n] - cpu0[n]) / span for n in live}
        total = sum(used.values())
        demand = {n: max(used[n], sum(v - demand0.get(n, {}).get(t, 0)
                                      for t, v in demand_ns[n].items()) / 1e9 / span
                         / max(0.05, self.lever.running(n))) if stats else math.inf
                  for n in live}
        wanted = targets({n: planned[n] for n in live}, demand, total)
        if total <= 0:
            return {}
        self._correct(live, used, total, demand, wanted)
        self.last_targets = wanted
        return wanted

    def _correct(self, live: list[str], used: Mapping[str, float], total: float,
                 demand: Mapping[str, float], wanted: Mapping[str, float]) -> None:
        """Move each hungry pipeline's weight by its error; a sated one runs unweighed."""
        sated = {n for n in live if demand[n] * 0.999 <= wanted[n] * total}  # all it asks
        for n in set(live) - sated:
            share = used[n] / total
            if share > 0 and abs(wanted[n] / share - 1) > DEADBAND:
                self.weights[n] *= min(2.0, max(0.5, wanted[n] / share)) ** GAIN
        heaviest = max((self.weights[n] for n in live if n not in sated), default=1.0)
        for n in live:
            self.weights[n] = 1.0 if n in sated else max(1e-3, self.weights[n] / heaviest)
        self._apply(live)

    def _apply(self, names: list[str]) -> None:
        for n in self.lever.apply({n: self.weights[n] for n in names}):
            self.corrections[n] += 1

