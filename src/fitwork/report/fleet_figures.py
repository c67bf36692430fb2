"""The fleet page's arithmetic: cores per pipeline over time, the main epoch, shares checked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fitwork.jobs.record import Decision, Epoch, FleetRecord, Sample

TOLERANCE = 0.10  # a realized share within ±10% of the planned one (relative) is on plan
WINDOW_S = 2.0  # cores used over time are CPU seconds over about this many seconds


@dataclass(frozen=True)
class ShareCheck:
    """One pipeline's realized share of the cores used against its planned share."""

    name: str
    planned: float
    realized: float

    @property
    def ratio(self) -> float:
        """Realized over planned (0 where nothing was planned)."""
        return self.realized / self.planned if self.planned > 0 else 0.0

    @property
    def on_plan(self) -> bool:
        """Whether the realized share is within `TOLERANCE` of the planned one."""
        return self.planned > 0 and abs(self.ratio - 1.0) <= TOLERANCE


def main_epoch(record: FleetRecord) -> Epoch | None:
    """The stretch the verdict reads: the longest with a plan and at least two pipelines
    running (else the longest with a plan); None when no epoch has planned shares."""
    planned = [e for e in record.epochs if e.planned_share]
    if not planned:
        return None
    return max(planned, key=lambda e: (len(e.running) > 1, e.end_s - e.start_s))


def share_checks(epoch: Epoch) -> list[ShareCheck]:
    """Each running pipeline's realized share against its planned share in ``epoch``."""
    return [ShareCheck(n, epoch.planned_share.get(n, 0.0), epoch.realized_share.get(n, 0.0))
            for n in epoch.running]


def decision_of(record: FleetRecord, epoch: Epoch) -> Decision | None:
    """The decision in force during ``epoch``: the last one made at or before its start."""
    made = [d for d in record.decisions if d.at_s <= epoch.start_s + 1e-9]
    return made[-1] if made else None


def allocated_cores(record: FleetRecord, epoch: Epoch) -> float | None:
    """Cores the plan gave the pipelines running in ``epoch`` (None without a decision)."""
    decision = decision_of(record, epoch)
    if decision is None:
        return None
    return sum(decision.cores.get(n, 0.0) for n in epoch.running)


def cores_used(samples: Sequence[Sample], name: str,
               window: float = WINDOW_S) -> list[tuple[float, float]]:
    """``(seconds, cores)`` of ``name``: CPU seconds it used over about the last ``window``
    seconds before each sample, divided by the seconds between the two samples."""
    mine = [s for s in samples if name in s.cpu_s]
    points = []
    for i, sample in enumerate(mine[1:], start=1):
        j = next(k for k in range(i) if mine[k].at_s >= sample.at_s - window or k == i - 1)
        span = sample.at_s - mine[j].at_s
        if span > 0:
            used = sample.cpu_s[name] - mine[j].cpu_s[name]
            points.append((sample.at_s, max(0.0, used) / span))
    return points


def total_used(samples: Sequence[Sample], names: Sequence[str],
               window: float = WINDOW_S) -> list[tuple[float, float]]:
    """``(seconds, cores)`` of every pipeline together, where at least one was running."""
    found: dict[float, float] = {}
    for name in names:
        for t, cores in cores_used(samples, name, window):
            found[t] = found.get(t, 0.0) + cores
    return sorted(found.items())


def planned_steps(record: FleetRecord, name: str) -> list[tuple[float, float]]:
    """``(seconds, cores)`` the decisions gave ``name``, held from each decision to the
    next, from its first decision to its end (or the last decision)."""
    points = [(d.at_s, d.cores.get(name, 0.0)) for d in record.decisions
              if name in d.cores or name in d.running]
    ends = [o.ended_s for o in record.jobs if o.name == name and o.ended_s is not None]
    if points and ends and ends[0] > points[-1][0]:
        points.append((ends[0], points[-1][1]))
    return points


def run_seconds(record: FleetRecord) -> float:
    """Seconds from the fleet run's start to its last pipeline's end (or last sample)."""
    ends = [o.ended_s for o in record.jobs if o.ended_s is not None]
    ends += [s.at_s for s in record.samples] + [d.at_s for d in record.decisions]
    return max(ends, default=0.0)


@dataclass(frozen=True)
class Move:
    """What a decision did to one pipeline still running: cores used in the epoch before
    and after it, and how many seconds after it the pipeline got halfway there."""

    name: str
    before: float
    after: float
    halfway_s: float | None


def moves(record: FleetRecord, decision: Decision) -> list[Move]:
    """Each pipeline running on both sides of ``decision``: its cores before and after."""
    before = [e for e in record.epochs if e.end_s <= decision.at_s + 1e-9]
    after = [e for e in record.epochs if e.start_s >= decision.at_s - 1e-9]
    if not before or not after:
        return []
    old, new = before[-1], after[0]
    found = []
    for name in (n for n in new.running if n in old.running):
        low, high = old.cores_used.get(name, 0.0), new.cores_used.get(name, 0.0)
        mid = (low + high) / 2
        reached = next((t - decision.at_s for t, c in cores_used(record.samples, name)
                        if t > decision.at_s and (c >= mid if high >= low else c <= mid)),
                       None)
        found.append(Move(name, low, high, reached))
    return found
