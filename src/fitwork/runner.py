"""`fitwork.run`: run a pipeline on an engine, with a placement from a plan or from counts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fitwork.engine.contract import RunResult
from fitwork.engine.options import RunOptions, engine_options
from fitwork.engine.parts import Sink
from fitwork.engine.registry import get_engine
from fitwork.errors import UnitDefinitionError
from fitwork.placement import Group, Placement
from fitwork.shards import READER, Source
from fitwork.workload.pipeline import Pipeline


def run(
    pipeline: Pipeline,
    source: Iterable[Any],
    *,
    engine: str = "local",
    placement: Placement | Any | None = None,
    workers: Mapping[str, int] | None = None,
    ordered: bool = False,
    dead_letter: str | Path | None = None,
    max_failures: int | None = None,
    max_attempts: int = 3,
    progress: Any = None,
    progress_interval: float = 0.1,
    sample_interval: float = 0.1,
    sample_devices: bool = True,
    adapt: bool = False,
    spans: bool = False,
    dead_letter_keep: int | None = None,
    sink: Sink | None = None,
    **options: Any,
) -> RunResult:
    """Run ``pipeline`` over ``source`` and return at once; iterate the result for outputs.

    ``placement`` is a `Placement`, or a plan (anything with a ``placement()`` method, as
    `fitwork.Plan` has); without one, each unit runs its declared replicas.  ``workers``
    overrides replica counts by unit name.  Other keyword arguments are the engine's own
    options (``channel_capacity``, ``gpus`` for ``local``; ``address``, ``startup_timeout``,
    ``call_timeout`` for ``ray``; ``rates`` for ``sim``), checked against it by name.
    With ``adapt=True`` (and a plan as ``placement``) the run compares each unit's measured
    rate with the plan's and re-fits itself while it goes on (`fitwork.engine.adapt`).
    ``spans=True`` releases outputs a frame at a time with the source items they cover
    (`RunResult.settled_spans`, what `fitwork.journal` records); ``dead_letter_keep=N``
    keeps the dead-letter file's first N bytes and appends to it (a resumed run).

    ``source`` may be a `fitwork.Source` (shards of data files, or your own shards): a
    reader unit named ``read`` then runs in front of the pipeline and its replicas read the
    shards' rows, so no item passes through this process.  ``sink`` (a `fitwork.Sink`) has
    the last unit's replicas write the outputs into part files of a directory themselves;
    the result then yields how many outputs each step committed (`fitwork.engine.parts`).
    """
    chosen = get_engine(engine)
    readers = None
    if isinstance(source, Source) and workers and READER in workers:
        workers = dict(workers)  # the reader's count is not the pipeline's to check
        readers = workers.pop(READER)
    own = engine_options(engine, chosen.options, options)
    replanner = None
    if placement is None:
        placed = Placement.declared(pipeline, workers)
    else:
        placed = placement if isinstance(placement, Placement) else placement.placement()
        placed = placed.with_workers(dict(workers or {}))
    if adapt and getattr(placement, "fused", False):
        adapt = False  # the plan chose to run the stages fused: nothing to re-balance
    if adapt:
        if placement is None or isinstance(placement, Placement):
            raise UnitDefinitionError("adapt=True re-fits a plan while the run goes on: pass "
                                      "the plan as placement= (fitwork run --plan FILE "
                                      "--adapt)")
        from fitwork.fit.replan import PlanReplanner

        replanner = PlanReplanner(placement, placed)
    pipeline = placed.applied_to(pipeline)
    if isinstance(source, Source):
        pipeline, placed = _with_reader(pipeline, placed, source, readers,
                                        fuse=replanner is None)
        source = source.shards
    run_options = RunOptions(
        ordered=ordered, dead_letter=Path(dead_letter) if dead_letter else None,
        max_failures=max_failures, max_attempts=max_attempts, progress=progress,
        progress_interval=progress_interval, sample_interval=sample_interval,
        sample_devices=sample_devices, adapt=replanner, spans=spans,
        resume_dead_letters=dead_letter_keep, sink=sink)
    return chosen.run(pipeline, source, placed.check(pipeline), run_options, own)


def _with_reader(pipeline: Pipeline, placed: Placement, source: Source,
                 readers: int | None, fuse: bool) -> tuple[Pipeline, Placement]:
    """``pipeline`` with the source's reader unit in front, and the placement with its
    replicas (as many as ``workers`` gave it, or the source's ``readers``).

    Where the first unit is a plain one and nobody set the readers' count (nor re-fits
    the run by unit), the reader runs that unit too, with its replicas: rows then take no
    hop and no replica of their own between reading and the first unit.
    """
    first = pipeline.units[0]
    own = [g for g in placed.groups if g.unit == first.name]
    fused = (fuse and readers is None and first.is_plain
             and all(g.batch_size is None for g in own))
    units = pipeline.units[1:] if fused else pipeline.units
    reader = (source.reader(replace(first, replicas=placed.replicas(first.name))) if fused
              else source.reader())
    if reader.name in {u.name for u in units}:
        reader = replace(reader, name=f"{reader.name}_shards")
    if fused:  # the first unit's groups become the reader's (more if the source asked)
        short = reader.replicas - placed.replicas(first.name)
        groups = (*[replace(g, unit=reader.name, replicas=g.replicas + (short if i == 0 else 0))
                    for i, g in enumerate(own)],
                  *[g for g in placed.groups if g.unit != first.name])
    else:
        groups = (Group(reader.name, readers if readers is not None else reader.replicas),
                  *placed.groups)
    return (Pipeline(reader, *units, name=pipeline.name, context=pipeline.context),
            replace(placed, groups=groups))
