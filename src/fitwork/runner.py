"""`fitwork.run`: run a pipeline on an engine, with a placement from a plan or from counts."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from fitwork.engine.contract import RunResult
from fitwork.engine.options import RunOptions, engine_options
from fitwork.engine.parts import Sink
from fitwork.engine.registry import get_engine
from fitwork.errors import UnitDefinitionError
from fitwork.io.shards import READER, Source
from fitwork.placement import Group, Placement
from fitwork.workload.pipeline import Pipeline

if TYPE_CHECKING:
    from fitwork.fit.plan import Plan


def run(pipeline: Pipeline, source: Iterable[Any] | str | Path, *, engine: str = "local",
        placement: Placement | Plan | None = None, workers: Mapping[str, int] | None = None,
        ordered: bool = False, dead_letter: str | Path | None = None,
        max_failures: int | None = None, max_attempts: int = 3, progress: Any = None,
        progress_interval: float = 0.1, sample_interval: float = 0.1,
        sample_devices: bool = True, adapt: bool = False, spans: bool = False,
        dead_letter_keep: int | None = None,
        output: str | Path | Sink | IO[bytes] | None = None, journal: str | Path | None = None,
        resume: bool = False, append: bool = False, limit: int | None = None,
        **options: Any) -> RunResult:
    """Run ``pipeline`` over ``source`` and return at once; iterate the result for outputs.

    ``placement`` is a `Placement` or a `fitwork.Plan` (its fitted placement); without one,
    each unit runs its declared replicas; ``workers`` overrides counts by unit name.  Other
    keyword arguments are the engine's own options (``channel_capacity``, ``gpus`` for
    ``local``; ``address``, ``startup_timeout``, ``call_timeout`` for ``ray``; ``rates`` for
    ``sim``), checked by name.  ``adapt=True`` (with a plan) re-fits the run as it goes.
    ``spans=True`` releases outputs a frame at a time with the source items they cover
    (`RunResult.settled_spans`); ``dead_letter_keep=N`` keeps the dead-letter file's first
    N bytes and appends to it; ``limit=N`` runs the first N items.  A path as ``source`` is
    read with `fitwork.io.inputs.read_items`; a `fitwork.Source` has reader replicas read its
    shards.

    ``output`` is the one way a run writes its outputs itself, its record carrying their
    digest: a JSON Lines or Parquet file, an open binary stream (JSON Lines, e.g.
    ``sys.stdout.buffer``), or a directory (``"out/"``) or `fitwork.Sink` whose parts the
    last unit's replicas write (the result then yields how many outputs each step
    committed).  ``journal`` (a directory) journals it, so that ``resume=True`` continues
    it after a crash, running only the items not done and keeping each output once (the
    digest is then the whole output's); ``append=True`` writes after what a JSON Lines
    output holds.  Such a run starts when first used (iterated, entered, or asked for its
    record), and yields each output once written (`fitwork.io.journaled`).
    """
    if "sink" in options:
        raise UnitDefinitionError("sink= is output= now: pass output=fitwork.Sink.files(DIR) "
                                  "(or output='DIR/'), the one way a run writes outputs")
    if isinstance(source, str | Path):
        from fitwork.io.inputs import read_items

        source = read_items(source)
    launch = _arrange(pipeline, engine, placement, workers, adapt, options,
                      isinstance(source, Source), RunOptions(
                          ordered=ordered, dead_letter=Path(dead_letter) if dead_letter else None,
                          max_failures=max_failures, max_attempts=max_attempts,
                          progress=progress, progress_interval=progress_interval,
                          sample_interval=sample_interval, sample_devices=sample_devices))
    if output is None and journal is None and not (resume or append):
        return launch(source if limit is None else itertools.islice(source, limit), None,
                      spans, dead_letter_keep)
    from fitwork.io.journaled import Run

    return Run(launch, pipeline, source, output,
               journal=Path(journal) if journal is not None else None, resume=resume,
               append=append, limit=limit)


@dataclass(frozen=True)
class Launch:
    """A run arranged (engine, placement, options checked) and not yet started: call it
    with the source, the sink, whether to release spans and the dead letters to keep."""

    engine: Any
    own: Any
    pipeline: Pipeline
    placed: Placement
    replanner: Any
    readers: int | None
    options: RunOptions

    def __call__(self, source: Iterable[Any], sink: Sink | None = None, spans: bool = False,
                 keep: int | None = None) -> RunResult:
        self.refuse_order(sink)
        pipeline, placed = self.pipeline, self.placed
        if isinstance(source, Source):
            pipeline, placed = _with_reader(pipeline, placed, source, self.readers,
                                            fuse=self.replanner is None)
            source = source.shards
        options = replace(self.options, adapt=self.replanner, spans=spans,
                          resume_dead_letters=keep, sink=sink)
        return self.engine.run(pipeline, source, placed.check(pipeline), options, self.own)

    def refuse_order(self, sink: Sink | None) -> None:
        """``ordered=True`` into parts is refused: each replica writes its own part."""
        if self.options.ordered and sink is not None:
            raise UnitDefinitionError(
                f"ordered=True with output {sink.directory}/ (parts): each replica writes "
                "its own part, so no order across them is kept; drop ordered, or write to "
                "a file")


def _arrange(pipeline: Pipeline, engine: str, placement: Placement | Plan | None,
             workers: Mapping[str, int] | None, adapt: bool, options: dict[str, Any],
             sharded: bool, run_options: RunOptions) -> Launch:
    """The engine chosen and its options checked, the placement made once (from a plan,
    counts or the units' declarations) and applied to the pipeline."""
    chosen = get_engine(engine)
    readers = None
    if sharded and workers and READER in workers:
        workers = dict(workers)  # the reader's count is not the pipeline's to check
        readers = workers.pop(READER)
    own = engine_options(engine, chosen.options, options)
    placed, plan = _placement(pipeline, placement, workers)
    replanner = None
    if adapt:
        if plan is None:
            raise UnitDefinitionError("adapt=True re-fits a plan while the run goes on: pass "
                                      "the plan as placement= (fitwork run --plan FILE "
                                      "--adapt)")
        from fitwork.fit.replan import PlanReplanner

        replanner = PlanReplanner(plan, placed)
    return Launch(chosen, own, placed.applied_to(pipeline), placed, replanner, readers,
                  run_options)


def _placement(pipeline: Pipeline, given: Placement | Plan | None,
               workers: Mapping[str, int] | None) -> tuple[Placement, Plan | None]:
    """The one place ``placement=`` is read: a `Placement` as it is, a `Plan` as its fitted
    placement (and the plan, for ``adapt``), nothing as the units' declared replicas;
    ``workers`` overrides counts.  Anything else is a TypeError."""
    if given is None:
        return Placement.declared(pipeline, workers), None
    if isinstance(given, Placement):
        return given.with_workers(dict(workers or {})), None
    from fitwork.fit.plan import Plan

    if isinstance(given, Plan):
        return given.placement().with_workers(dict(workers or {})), given
    raise TypeError(f"placement= takes a fitwork.Placement or a fitwork.Plan, not "
                    f"{type(given).__name__}; pass plan.placement(...) for a node type or side")


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
