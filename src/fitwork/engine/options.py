"""Run options: portable ones every engine honours, and each engine's own, validated by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from fitwork.errors import UnitDefinitionError
from fitwork.telemetry.record import Progress


@dataclass(frozen=True)
class RunOptions:
    """How a run behaves, whatever engine runs it.

    ``max_attempts`` bounds how often an item is fed after killing workers (then it is
    poison); a unit's own ``retry`` policy covers exceptions.  ``max_failures`` stops the run
    once more items than that have failed.  ``dead_letter`` is a JSON Lines file this run
    writes its failed items to (truncated when the run starts, each line with the run id).
    ``adapt`` is a `fitwork.engine.adapt.Replanner` (built from a plan by `fitwork.run`
    when ``adapt=True``): with one, the run re-fits itself while it goes on.  ``spans``
    releases a frame's outputs together once all its items settle, with the source span
    they cover (`RunResult.settled_spans`: what a journal records).
    ``resume_dead_letters`` keeps the first that many bytes of an existing dead-letter file
    and appends after them, instead of starting it afresh (a resumed run).  ``sink`` (a
    `fitwork.engine.parts.Sink`) has the last unit's replicas write the outputs into part
    files themselves: the driver sees none, and the run's result yields, instead of outputs,
    how many outputs each step committed.
    """

    ordered: bool = False
    dead_letter: Path | None = None
    max_failures: int | None = None
    max_attempts: int = 3
    progress: Callable[[Progress], None] | None = None
    progress_interval: float = 0.1
    sample_interval: float = 0.1
    sample_devices: bool = True
    adapt: Any = None
    spans: bool = False
    resume_dead_letters: int | None = None
    sink: Any = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise UnitDefinitionError(f"max_attempts={self.max_attempts}: must be >= 1")
        if self.max_failures is not None and self.max_failures < 0:
            raise UnitDefinitionError(f"max_failures={self.max_failures}: must be >= 0")


@dataclass(frozen=True)
class LocalOptions:
    """The local engine's own options: channel capacity (frames) and the GPUs to spread over.

    ``gpus`` lists GPU ids replicas of GPU units take in turn (``CUDA_VISIBLE_DEVICES``);
    ``None`` takes what this process may see.  ``spares``: how many workers a unit that lost
    one keeps forked and built ahead, so a death costs a hand-over, not a start
    (`fitwork.engine.local.spare`; 0 or False: none).
    """

    channel_capacity: int = 8
    gpus: tuple[str, ...] | None = None
    spares: int = 1


@dataclass(frozen=True)
class RayOptions:
    """The Ray engine's own options.

    ``address`` is the cluster to join (``None``: ``RAY_ADDRESS``, or a new one on this
    host); ``startup_timeout`` bounds placing every replica; ``call_timeout`` bounds every
    other call the driver makes into Ray (registry, stats), so nothing waits forever;
    ``in_flight`` is how many frames each replica may hold.  ``task_replicas=True`` runs a
    pipeline of one stateless unit (a plan that fused every stage, say) as Ray tasks on
    Ray's warm worker pool instead of actors: no replica start-up, the same books
    (`fitwork.engine.ray.tasks`); other pipelines keep their actors.  ``keep_warm=S``
    keeps the replicas alive ``S`` seconds after the run for the next run of the same
    pipeline on that cluster to adopt (`fitwork.engine.ray.warm`).  ``spares`` (1 or
    more): a unit that lost a replica keeps spare actors, and its replicas that fork their
    unit keep a child built behind the one that runs (`fitwork.engine.ray.forked`), so a
    death costs a hand-over; 0: neither (a death then costs a start and a build; a built
    spare holds as much memory as the unit).  ``fork_first=True``: replicas of units that
    hold no device run their unit in a forked child from the start, not only once the unit
    has lost one, so a replica's first death costs a hand-over too, not an actor (for
    inputs with rows that kill their process).  Not for a unit that calls Ray itself (the
    child has no Ray), nor with ``keep_warm`` (a pool keeps actors, not their children).
    """

    address: str | None = None
    startup_timeout: float = 60.0
    call_timeout: float = 30.0
    in_flight: int = 4
    task_replicas: bool = False
    keep_warm: float = 0.0
    spares: int = 1
    fork_first: bool = False

    def __post_init__(self) -> None:
        if self.fork_first and self.keep_warm:
            raise UnitDefinitionError(
                "Ray engine options fork_first and keep_warm do not go together (a warm "
                "pool keeps actors, not their forked children); drop one")


@dataclass(frozen=True)
class SimOptions:
    """The simulated engine's options: seconds per item of one replica, by unit.

    ``rates`` (items/s of one replica, by unit name) override a placement's predicted
    rates; units with neither take ``default_seconds`` per item.  ``horizon`` stops the
    virtual clock (``None``: run the source dry).  ``kill_rate`` kills each replica at
    random, that many times per simulated second on average (``seed`` fixes the draw).
    ``schedule`` changes rates while the run goes on: per unit, ``(from time, rate)`` steps
    in simulated seconds (a unit that slows down, say, to test live re-fitting).
    ``arrival_rate`` paces the source: item ``i`` is there from ``i / arrival_rate``
    seconds on (``None``: the source is always ready).
    """

    rates: Mapping[str, float] | None = None
    default_seconds: float = 0.001
    horizon: float | None = None
    kill_rate: float = 0.0
    seed: int = 0
    schedule: Mapping[str, Sequence[tuple[float, float]]] | None = None
    arrival_rate: float | None = None


def engine_options(engine: str, kind: type[Any], given: Mapping[str, Any]) -> Any:
    """``kind(**given)``, or a one-line error naming the engine and the options it takes."""
    known = [f.name for f in fields(kind)]
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise UnitDefinitionError(
            f"engine {engine!r} takes no option {', '.join(map(repr, unknown))}; its options "
            f"are {', '.join(known)}")
    return kind(**given)
