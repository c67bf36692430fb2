"""The fleet record: what every pipeline of a `fitwork run --jobs` got, against the plan.

Beside each pipeline's own run record, the fleet record keeps how each ended, every re-fit
decision with its reason, and the coordinator's readings of each pipeline's CPU seconds.
Between two decisions the plan is fixed (an EPOCH); per epoch it states each pipeline's
realized share of the cores used against its planned share, and the fleet's cores busy over
cores owned, realized against predicted.  A realized figure over what was allocated is said
as such (the plan under-allocated), never clamped.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, Field

from fitwork.document import Document
from fitwork.version import __version__

if TYPE_CHECKING:
    from fitwork.jobs.plan import FleetPlan
    from fitwork.jobs.spec import JobsFile

__all__ = ["Decision", "Epoch", "FleetRecord", "JobOutcome", "Sample", "ShareControl"]


class JobOutcome(BaseModel):
    """How one pipeline's run ended."""

    name: str
    team: str
    status: Literal["succeeded", "failed", "rejected"]
    exit_code: int | None
    started_s: float | None = None
    ended_s: float | None = None
    cpu_s: float = 0.0
    reason: str | None = None
    record: str | None = None


class Decision(BaseModel):
    """A re-fit: when, why, and what each running pipeline got."""

    at_s: float
    reason: str
    running: list[str]
    replicas: dict[str, dict[str, int]] = Field(default_factory=dict)
    rates: dict[str, float] = Field(default_factory=dict)
    cores: dict[str, float] = Field(default_factory=dict)
    solve_s: float = 0.0


class Sample(BaseModel):
    """CPU seconds each running pipeline's processes had used at ``at_s``."""

    at_s: float
    cpu_s: dict[str, float]
    read_at_s: dict[str, float] = Field(default_factory=dict)
    """When each pipeline's reading was taken (its processes are read one pipeline after
    another, which on a busy host takes a while): its rates are over its own times."""
    planned_cores: dict[str, float] = Field(default_factory=dict)
    target_share: dict[str, float] = Field(default_factory=dict)
    """The share controller's target for each pipeline then: its planned share renormalised
    over the CPU-hungry pipelines (`fitwork.jobs.shares.targets`)."""


class ShareControl(BaseModel):
    """How the shares were held: the lever moved and how many times, per pipeline."""

    lever: str
    corrections: dict[str, int] = Field(default_factory=dict)


class Epoch(BaseModel):
    """One stretch between decisions: planned against realized shares and utilization."""

    start_s: float
    end_s: float
    running: list[str]
    planned_share: dict[str, float]
    realized_share: dict[str, float]
    cores_used: dict[str, float]
    target_share: dict[str, float] = Field(default_factory=dict)
    predicted_utilization: float | None
    realized_utilization: float

    def share_ratio(self, name: str) -> float:
        """Realized over planned share of ``name`` (nan where none was planned)."""
        planned = self.planned_share.get(name, math.nan)
        return self.realized_share.get(name, math.nan) / planned if planned else math.nan

    def target_ratio(self, name: str) -> float:
        """Realized over the controller's mean target share of ``name`` (nan if none)."""
        target = self.target_share.get(name, math.nan)
        return self.realized_share.get(name, math.nan) / target if target else math.nan


class FleetRecord(Document):
    """Every pipeline's outcome, the decisions, the samples and the epochs they make."""

    document_kind: ClassVar[str] = "fleet record"
    document_maker: ClassVar[str] = "`fitwork run --jobs ... --fleet-record FILE`"

    fitwork_version: str
    planned: bool
    host_cores: int
    engine: str = "local"
    started_at: float = 0.0
    """Wall-clock time (seconds since the epoch) of the fleet run's start: every ``*_s``
    here counts from it, and a pipeline's own record's ``started_at`` places it."""
    teams: dict[str, str]
    jobs: list[JobOutcome]
    decisions: list[Decision]
    samples: list[Sample]
    epochs: list[Epoch]
    cost_per_team: dict[str, float] = Field(default_factory=dict)
    share_control: ShareControl | None = None

    @classmethod
    def build(cls, jobs: JobsFile, plan: FleetPlan | None, outcomes: list[JobOutcome],
              decisions: list[Decision], samples: list[Sample], cores: int,
              engine: str = "local", started_at: float = 0.0,
              share_control: ShareControl | None = None) -> FleetRecord:
        """The record of a fleet run from the coordinator's books (``samples`` only where
        the pipelines' processes are this host's: not on Ray, whose workers are Ray's)."""
        order = {j.name: i for i, j in enumerate(jobs.jobs)}
        wall = max((o.ended_s or 0.0 for o in outcomes), default=0.0)
        return cls(fitwork_version=__version__, planned=plan is not None, host_cores=cores,
                   engine=engine, started_at=started_at,
                   teams={j.name: j.team for j in jobs.jobs},
                   jobs=sorted(outcomes, key=lambda o: order.get(o.name, 0)),
                   decisions=decisions, samples=samples,
                   epochs=epochs(decisions, samples, cores),
                   cost_per_team=plan.cost_over(wall) if plan is not None else {},
                   share_control=share_control)

    @property
    def exit_code(self) -> int:
        """0 when every admitted pipeline succeeded, else 1."""
        return 0 if all(o.status != "failed" for o in self.jobs) else 1

    def lines(self) -> list[str]:
        """The console's summary: each pipeline's end, then each epoch's shares."""
        out = []
        for o in self.jobs:
            took = (f" in {o.ended_s - o.started_s:.1f} s" if o.ended_s is not None
                    and o.started_s is not None else "")
            why = f" ({o.reason})" if o.reason and o.status != "succeeded" else ""
            out.append(f"{o.name} [{o.team}]: {o.status}{took}, {o.cpu_s:.1f} CPU-s{why}")
        if self.engine != "local":
            out.append(f"shares of the cores not measured on --engine {self.engine}: the "
                       "replicas are the engine's workers, not this host's processes; each "
                       "pipeline's record has its workers' CPU time")
        if self.share_control is not None:
            moved = ", ".join(f"{n} {c}" for n, c in sorted(
                self.share_control.corrections.items())) or "none needed"
            out.append(f"shares held by the {self.share_control.lever} lever; corrections: "
                       f"{moved}")
        for e in self.epochs:
            if e.end_s - e.start_s < 1.0:
                continue
            shares = ", ".join(
                f"{n} {e.realized_share.get(n, 0):.0%}"
                + (f" (planned {e.planned_share[n]:.0%})" if n in e.planned_share else "")
                for n in e.running)
            util = f"cores busy {e.realized_utilization:.0%} of the host's"
            if e.predicted_utilization is not None:
                util += f" (predicted {e.predicted_utilization:.0%})"
            if e.realized_utilization > 1.0:
                util += ": more than the host has, a measurement error"
            out.append(f"{e.start_s:6.1f}-{e.end_s:6.1f} s: {shares}; {util}")
        return out


def epochs(decisions: list[Decision], samples: list[Sample], cores: int) -> list[Epoch]:
    """Per stretch between decisions, planned and realized shares from the samples in it."""
    bounds = [d.at_s for d in decisions] + [math.inf]
    found = []
    for i, d in enumerate(decisions):
        inside = [s for s in samples if bounds[i] <= s.at_s < bounds[i + 1]]
        if len(inside) < 2:
            continue
        first, last = inside[0], inside[-1]
        used = {}
        for n in last.cpu_s:
            span = last.read_at_s.get(n, last.at_s) - first.read_at_s.get(n, first.at_s)
            if n in first.cpu_s and span > 0:
                used[n] = max(0.0, last.cpu_s[n] - first.cpu_s[n]) / span
        total = sum(used.values())
        planned = {n: c for n, c in d.cores.items() if n in used and c > 0}
        ptotal = sum(planned.values())
        aimed = [s.target_share for s in inside if s.target_share]
        found.append(Epoch(
            start_s=first.at_s, end_s=last.at_s, running=sorted(used),
            planned_share={n: c / ptotal for n, c in planned.items()} if ptotal else {},
            realized_share={n: u / total for n, u in used.items()} if total else {},
            cores_used=used,
            target_share={n: sum(a.get(n, 0.0) for a in aimed) / len(aimed) for n in used}
            if aimed else {},
            predicted_utilization=min(ptotal, cores) / cores if planned else None,
            realized_utilization=total / cores))
    return found
