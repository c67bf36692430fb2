"""Live re-fitting: compare each unit's measured rate with the plan's, re-solve, resize.

Pure, like the core: it is given the core's books and a clock reading, and answers with
the replica counts to run (or nothing).  The re-solving itself is a `Replanner` handed in
(the fit layer's, built from the plan's fleet and profile)::

    every tick:  measured rate per replica, per unit, over the last `window` seconds
                 (items taken ÷ busy seconds of its replicas)
    trigger:     some unit off its planned rate, or using more CPU per item than planned,
                 by more than the plan's own range (`Replanner.tolerance`, else
                 `tolerance`), or throughput under `shortfall` x the plan's prediction
                 while the source waits on the pipeline (a slow source is no reason to
                 re-fit), for a whole window
    re-solve:    the same solver and fleet, with the measured rates and CPU per item; where
                 replicas waited for cores (run-queue time), the cores they got are the
                 budget, so a unit slowed by a busier host shows no gain from more replicas
    apply:       only if the new plan predicts `gain` more than the current one does at the
                 measured rates, and `interval` seconds after the last change
    threads:     the re-fit also re-allots threads: each replica's pools (BLAS, OpenMP,
                 torch) are held to the cores the re-solved plan gives it, and a fused or
                 I/O unit runs the calls at once it plans (`threads_of`, from `allot`); where
                 that changes the record says so and why, and the re-fit's groups become
                 what the core starts replicas from (replicas started from then on run
                 with them; a running process keeps the pools it was started with)

    host:        where the replanner reads the host (`Hosted`: a plan for one node, the
                 one the run is on), the share of its cores other processes left over the
                 window (the host's busy CPU seconds less the workers' and the driver's) is
                 read too: where it is over the plan's core ceiling by `grow` while the
                 source waits on the pipeline, the run is re-solved at that share, so a
                 plan made while the host was busy grows its replicas once it is free; any
                 re-solve with a reading over the ceiling plans at it (never lower: what
                 others took while the replicas did not ask for it, more replicas would get
                 a fair share of; a run starved of cores is the run-queue rule's case)

Hysteresis (``gain``) and the minimum interval keep it from thrashing.  Every re-solve is a
`Refit` in the run record, applied or not: one that changed nothing has ``after`` equal to
``before`` and its reason says why it was kept (the re-solved layout is the one running, or
it predicts too little more).  Either way the measured rates become the reference the next
window is compared with, so a unit that is simply slower than profiled is re-solved once,
not every window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from fitwork.engine.core.machine import RunCore
from fitwork.placement import Group, Placement, allot
from fitwork.telemetry.record import Refit

if TYPE_CHECKING:
    from fitwork.workload.unit import Unit


def threads_of(placement: Placement, units: Sequence[Unit]) -> dict[str, int]:
    """Calls at once per replica of each unit: its largest group's allotment's
    (`fitwork.placement.Allotment.calls`: its ``io``, else its pools' threads)."""
    largest: dict[str, Group] = {}
    for group in placement.groups:
        if group.replicas and group.replicas > getattr(largest.get(group.unit), "replicas", 0):
            largest[group.unit] = group
    return {u.name: allot(u, largest[u.name]).calls for u in units if u.name in largest}


def allotment_change(before: Placement, after: Placement, units: Sequence[Unit],
                     cpu: dict[str, float], rates: dict[str, float]) -> str:
    """What a re-fit changes of the threads per replica, and why ('' where nothing)."""
    old, new = threads_of(before, units), threads_of(after, units)
    said = []
    for name in sorted(set(old) & set(new)):
        if old[name] != new[name]:
            busy = cpu.get(name, 0.0) * rates.get(name, 0.0)
            why = (f" (a replica keeps {busy:.2f} cores busy at the measured "
                   f"{cpu[name] * 1e3:,.2f} ms of CPU per item)" if name in cpu else "")
            said.append(f"{name!r} {old[name]} -> {new[name]}{why}")
    return "threads per replica: " + ", ".join(said) if said else ""


class Replanner(Protocol):
    """What the adapter needs of a plan: its rates, its predictions, and a re-solve."""

    def planned_rates(self) -> dict[str, float]:
        """Items/s of one replica of each unit, as the plan predicted."""
        ...

    def predict(self, counts: dict[str, int], rates: dict[str, float],
                cpu: dict[str, float] | None = None, cores: float | None = None) -> float:
        """Source items/s these replica counts sustain at these per-replica rates, within
        the core budget (``cores``, if fewer are to be had) at ``cpu`` seconds per item."""
        ...

    def refit(self, rates: dict[str, float],
              cpu: dict[str, float] | None = None) -> Placement:
        """A new placement for the same fleet with these measured per-replica rates and
        CPU seconds per item."""
        ...


@runtime_checkable
class Ranged(Protocol):
    """What a replanner may also say: the CPU per item the plan assumed of each unit's
    replicas, and the share by which its predictions may miss (its range)."""

    def planned_cpu(self) -> dict[str, float]:
        ...

    def tolerance(self) -> float:
        ...


@runtime_checkable
class Hosted(Protocol):
    """What a replanner may also do: read the host the run is on, and re-solve at another
    core ceiling (the share of the host's cores the plan may use)."""

    def ceiling(self) -> float:
        """The core ceiling the plan is solved at now."""
        ...

    def host_reading(self) -> tuple[float, float, float, int] | None:
        """(seconds, host busy CPU seconds, this process's CPU seconds, cores) now; None
        where the host cannot be read (or the plan is not for this host alone)."""
        ...

    def set_ceiling(self, ceiling: float) -> None:
        """Plan from now on at ``ceiling`` (predictions and re-solves alike)."""
        ...


@dataclass(frozen=True)
class AdaptPolicy:
    """When the adapter acts (see the module docstring)."""

    window: float = 2.0
    tolerance: float = 0.25
    shortfall: float = 0.8
    gain: float = 0.1
    interval: float = 3.0
    min_items: int = 5
    starved: float = 0.2
    grow: float = 0.15


class Adapter:
    """Watches a run's books and proposes new replica counts."""

    def __init__(self, replanner: Replanner, units: Sequence[Unit],
                 policy: AdaptPolicy | None = None) -> None:
        self.replanner = replanner
        self.units = list(units)  # whose allotments a re-fit compares (`threads_of`)
        self.policy = policy or AdaptPolicy()
        self.rates = dict(replanner.planned_rates())
        ranged = replanner if isinstance(replanner, Ranged) else None
        self.cpu = dict(ranged.planned_cpu()) if ranged is not None else {}
        given = ranged.tolerance() if ranged is not None else 0.0
        self.tolerance = given if given > 0 else self.policy.tolerance
        self.hosted = replanner if isinstance(replanner, Hosted) else None
        self.history: deque[tuple[float, list[int], list[float], list[float], float, int]] = \
            deque()
        self.readings: deque[tuple[float, float, float, int] | None] = deque()
        self.last_change = float("-inf")
        self.refits: list[Refit] = []
        self.off_since: float | None = None

    def observe(self, core: RunCore, now: float, held: bool = False) -> dict[str, int] | None:
        """Take a reading; return the replica counts to resize to, or None.  ``held``: the
        driver's last feed stopped for want of an engine credit (a local run's channel),
        which waits on the pipeline as a core with no room does."""
        items, busy, used = list(core.stage_items), list(core.stage_busy), list(core.stage_cpu)
        waited = sum(core.stage_queued)
        self.history.append((now, items, busy, used, waited, core.completed))
        self.readings.append(self.hosted.host_reading() if self.hosted is not None else None)
        while len(self.history) > 2 and now - self.history[1][0] >= self.policy.window:
            self.history.popleft()
            self.readings.popleft()
        start, _, _, _, _, done0 = self.history[0]
        span = now - start
        if span < self.policy.window * 0.75 or now - self.last_change < self.policy.interval:
            return None
        measured, cpu = self._measured(core.names, items, busy, used)
        counts = {name: core.live(stage) for stage, name in enumerate(core.names)}
        saturated = (held or core.room() == 0) and not core.source_done
        free = self._free_share(used)
        reason = self._reason(measured, cpu, counts, (core.completed - done0) / span,
                              saturated) or self._freed(free, saturated)
        if reason is None:
            # a unit with no reading this window (no frame of it settled) is no evidence
            # that it is back on plan: the window it was off in goes on
            if all(name in measured for name, count in counts.items() if count):
                self.off_since = None
            return None
        if self.off_since is None:
            self.off_since = now
        if now - self.off_since < self.policy.window:
            return None
        rates = {**self.rates, **measured}
        if free is not None and self.hosted is not None and free > self.hosted.ceiling() + 0.005:
            # only up: what others took while the replicas did not ask for it, more replicas
            # would get a fair share of (a run starved of cores is `_starved_cores`' case)
            reason += (f"; re-solved at the {free:.0%} of the host's cores others left "
                       f"(the plan's ceiling was {self.hosted.ceiling():.0%})")
            self.hosted.set_ceiling(free)
        cores = self._starved_cores(busy, used, waited, span)
        current = self.replanner.predict(counts, rates, cpu, cores)
        placed = self.replanner.refit(rates, cpu)
        threads = allotment_change(core.placement, placed, self.units, cpu, rates)
        if threads:  # replicas started from now on run with the re-fit's allotment
            core.placement = _regrouped(core.placement, placed)
            reason = f"{reason}; {threads}"
        proposal = placed.counts()
        proposal = {name: max(1, proposal.get(name, counts[name])) for name in counts}
        expected = self.replanner.predict(proposal, rates, cpu, cores)
        self.off_since = None
        # The plan's rates were wrong: these are the new reference, applied or not.
        self.rates = rates
        self.cpu = {**self.cpu, **cpu}
        return self._decide(core, now, reason, counts, current, proposal, expected)

    def _free_share(self, used: list[float]) -> float | None:
        """The share of the host's cores other processes left over the window: its busy CPU
        seconds less the workers' and this process's, over cores x seconds (None unread)."""
        first, last = self.readings[0], self.readings[-1]
        if first is None or last is None or last[0] - first[0] <= 0:
            return None
        _, _, _, used0, _, _ = self.history[0]
        ours = sum(used) - sum(used0) + last[2] - first[2]
        others = last[1] - first[1] - ours
        return min(1.0, max(0.05, 1.0 - others / (last[3] * (last[0] - first[0]))))

    def _freed(self, free: float | None, saturated: bool) -> str | None:
        """Why to re-solve for cores freed since the plan was made, or None."""
        if self.hosted is None or free is None or not saturated:
            return None
        planned = self.hosted.ceiling()
        if free < planned + self.policy.grow:
            return None
        return (f"others left {free:.0%} of the host's cores over the last "
                f"{self.policy.window:g} s, the plan counted on {planned:.0%}")

    def _starved_cores(self, busy: list[float], used: list[float], waited: float,
                       span: float) -> float | None:
        """The cores obtained over the window if the replicas were starved of cores, else None."""
        # Replicas that spent a good share of their busy time waiting for a core had all the
        # cores they could get: that much CPU is the budget, more processes would only queue.
        _, _, busy0, used0, waited0, _ = self.history[0]
        spent = sum(busy) - sum(busy0)
        obtained = (sum(used) - sum(used0)) / span
        return obtained if spent > 0 and (waited - waited0) > self.policy.starved * spent \
            else None

    def _decide(self, core: RunCore, now: float, reason: str, counts: dict[str, int],
                current: float, proposal: dict[str, int], expected: float
                ) -> dict[str, int] | None:
        """Record the re-fit; the proposal where it differs and predicts enough gain, else None."""
        t_s = now - core.t0
        kept = None
        if proposal == counts:
            kept = "kept: re-solved at the measured rates, the layout running is the best"
        elif expected < current * (1 + self.policy.gain):
            kept = (f"kept: the re-solved layout {proposal} predicts {expected:,.1f} items/s, "
                    f"not {self.policy.gain:.0%} more than the {current:,.1f} of the one "
                    "running")
        if kept is not None:
            self.refits.append(Refit(t_s=t_s, reason=f"{reason}; {kept}",
                                     before=counts, after=counts, predicted_before=current,
                                     predicted_after=current))
            return None
        self.last_change = now
        self.history.clear()
        self.readings.clear()
        self.refits.append(Refit(t_s=t_s, reason=reason, before=counts,
                                 after=proposal, predicted_before=current,
                                 predicted_after=expected))
        return proposal

    def _measured(self, names: list[str], items: list[int], busy: list[float],
                  used: list[float]) -> tuple[dict[str, float], dict[str, float]]:
        """Per unit over the window: items/s of one busy replica, and CPU per item."""
        _, items0, busy0, used0, _, _ = self.history[0]
        measured, cpu = {}, {}
        for stage, name in enumerate(names):
            taken, spent = items[stage] - items0[stage], busy[stage] - busy0[stage]
            if taken >= self.policy.min_items and spent > 0:
                measured[name] = taken / spent
                cpu[name] = max(0.0, used[stage] - used0[stage]) / taken
        return measured, cpu

    def _reason(self, measured: dict[str, float], cpu: dict[str, float],
                counts: dict[str, int], throughput: float, saturated: bool) -> str | None:
        """Why the run is off its plan, or None.  A unit's CPU per item counts only above
        the plan's: the plan's figure also carries the driver's share of its frames, which
        the unit's own processes do not spend."""
        tolerance = self.tolerance
        off: list[tuple[float, str]] = []  # every unit beyond the range, the furthest first
        for name, rate in measured.items():
            planned = self.rates.get(name)
            used, assumed = cpu.get(name, 0.0), self.cpu.get(name, 0.0)
            slow = abs(rate / planned - 1) if planned else 0.0
            costly = used / assumed - 1 if assumed > 0 else 0.0
            if slow > tolerance or costly > tolerance:
                off.append((max(slow, costly),
                            f"unit {name!r} runs at {rate:,.1f} items/s per replica and "
                            f"{used * 1e3:,.2f} ms of CPU per item, the plan assumed "
                            f"{planned or 0:,.1f} and {assumed * 1e3:,.2f}"))
        if off:
            return "; ".join(line for _, line in sorted(off, reverse=True)) + \
                f" (the plan's range: ±{tolerance:.0%})"
        predicted = self.replanner.predict(counts, self.rates)
        if saturated and predicted and throughput < self.policy.shortfall * predicted:
            return (f"throughput {throughput:,.1f} items/s is under "
                    f"{self.policy.shortfall:.0%} of the {predicted:,.1f} predicted")
        return None


def _regrouped(running: Placement, placed: Placement) -> Placement:
    """``running`` with each unit the re-fit placed given the re-fit's groups (what new
    replicas start from), its fusion and notes kept."""
    units = set(placed.units)
    groups = [g for g in running.groups if g.unit not in units]
    groups += [g for g in placed.groups if g.unit in set(running.units)]
    return Placement(tuple(groups), "refit", running.notes, running.fusion)
