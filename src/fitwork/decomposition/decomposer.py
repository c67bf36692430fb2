"""``decompose``: a monolithic function in, a pipeline of units (and the report of how) out.

::

    fn ─▶ source + checks ──unsafe──▶ one unit, with the reason
              │
              ▼
          split at safe cuts ─▶ bookkeeping statements joined to a neighbour (fuse=True)
              │                          │
              │ sample                   └──no sample──▶ units (kinds from hints only)
              ▼
          first item run here: a value that will not pickle joins its neighbours
              │
              ▼
          profile each unit ─▶ kinds (hint, else measured) ─▶ fusion ─▶ units, re-profiled
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import itertools
import pickle
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from fitwork.decomposition.build import binder, make_unit, stage_function
from fitwork.decomposition.checks import unsupported
from fitwork.decomposition.fuse import Piece, plan_fusion
from fitwork.decomposition.hints import CONTEXT_ATTR, Demand, HintKind, resources_for
from fitwork.decomposition.kinds import KindSource, choose
from fitwork.decomposition.report import Cost, Decomposition, Merge, UnitReport
from fitwork.decomposition.source import DecomposeError, Located, Target, locate, target
from fitwork.decomposition.split import (
    Group,
    Split,
    analyse,
    bookkeeping_groups,
    groups_from_lines,
    joiner,
    log_merge,
    safe_groups,
)
from fitwork.profiling.profiler import profile_pipeline
from fitwork.profiling.record import PipelineProfile, UnitProfile
from fitwork.workload.pipeline import Pipeline
from fitwork.workload.unit import Kind, Unit, unit

MAX_SAMPLES = 16
ContextFactory = Callable[[], AbstractContextManager[Any]]


class DecomposedPipeline(Pipeline):
    """A pipeline made by `decompose`; ``decomposition`` says how it was made."""

    def __init__(self, units: list[Unit], *, name: str, context: ContextFactory | None,
                 decomposition: Decomposition) -> None:
        super().__init__(units, name=name, context=context)
        self.decomposition = decomposition

    @property
    def profile(self) -> PipelineProfile | None:
        """The profile of these units on the sample, when one was given (ready for `fit`)."""
        return self.decomposition.profile


def decompose(fn: Callable[..., Any], *, sample: Iterable[Any] | None = None, fuse: bool = True,
              samples: int = MAX_SAMPLES, context: ContextFactory | None = None,
              name: str | None = None, layout: Decomposition | None = None
              ) -> DecomposedPipeline:
    """Split a function that does everything for one item into a pipeline of units.

    The body is cut at top-level statements; each unit receives exactly the variables later
    units read and passes on only those.  With ``sample`` (items; the first ``samples`` are
    used) each unit is profiled, its kind inferred (a ``hint`` wins) and neighbours fused
    where moving their data costs more than splitting gains.  A function that cannot be
    split safely becomes one unit, with the reason in ``.decomposition.fallback``.  A saved
    ``layout`` (a `Decomposition`) rebuilds the same units without measuring again.
    """
    chosen = target(fn)
    context = context or getattr(chosen.fn, CONTEXT_ATTR, None)
    name = name or chosen.fn.__name__
    located = locate(chosen.fn)
    if isinstance(located, str):
        return _whole(fn, chosen, None, located, sample, samples, context, name)
    reason = unsupported(located.node, chosen.fn.__code__.co_freevars, chosen.fn.__qualname__)
    if reason:
        return _whole(fn, chosen, located, reason, sample, samples, context, name)
    split = analyse(chosen, located)
    if len(split.statements) < 2:
        return _whole(fn, chosen, located, None, sample, samples, context, name,
                      notes=split.notes)
    bind = binder(chosen)
    job = _Job(fn, chosen, located, split, bind, context, name)
    if layout is not None:
        return job.from_layout(layout)
    items = list(itertools.islice(sample, samples)) if sample is not None else []
    groups, merges = safe_groups(split)
    if fuse:
        groups, more = bookkeeping_groups(split, groups)
        merges += more
    if not items:
        job.notes.append("no sample: kinds come from hints and waiting calls alone, and only "
                         "bookkeeping statements were joined" if fuse
                         else "no sample, fusion off")
        return job.finish(groups, merges, job.by_source(groups), None)
    return job.measured(groups, merges, items, fuse)


def explain(fn: Callable[..., Any], **options: Any) -> Decomposition:
    """The report of how `decompose` splits ``fn`` (same options)."""
    return decompose(fn, **options).decomposition


def _source_hash(located: Located | None) -> str:
    if located is None:
        return ""
    node = located.node
    text = located.segment(node.lineno, node.end_lineno or node.lineno)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cost(profile: UnitProfile) -> Cost:
    return Cost(wall_s=profile.wall_s, cpu_s=profile.cpu_s, accel_s=profile.accel_s,
                bytes_in=profile.bytes_in, bytes_out=profile.bytes_out, bound=profile.bound)


def _header(fn: Callable[..., Any], chosen: Target, located: Located | None
            ) -> dict[str, Any]:
    code = chosen.fn.__code__
    node = located.node if located else None
    first = code.co_firstlineno
    return {"function": chosen.fn.__qualname__, "module": chosen.fn.__module__ or "",
            "filename": code.co_filename,
            "lines": (first, node.end_lineno or first) if node else (first, first),
            "source_hash": _source_hash(located),
            "generator": inspect.isgeneratorfunction(chosen.fn)}


def _whole(fn: Callable[..., Any], chosen: Target, located: Located | None, reason: str | None,
           sample: Iterable[Any] | None, samples: int, context: ContextFactory | None,
           name: str, notes: list[str] | None = None) -> DecomposedPipeline:
    """The function as one unit (it could not, or need not, be split)."""
    header = _header(fn, chosen, located)
    whole = unit(fn if chosen.is_method else chosen.fn, name=name)
    items = list(itertools.islice(sample, samples)) if sample is not None else []
    kind: HintKind | None = None
    source: KindSource = "default"
    profiled = None
    if items:
        profiled = profile_pipeline(Pipeline(whole, name=name, context=context), items,
                                    samples=len(items))
        kind, source, demand = choose(None, profiled.units[0])
        whole = Unit(fn=whole.fn, name=name, kind=whole.kind, resources=demand.resources,
                     io=demand.io, cpu_given=False)  # an estimate: Ray may share cores out
        profiled = _with_resources(profiled, [whole])
    text = located.segment(*header["lines"]) if located else ""
    report = UnitReport(
        name=name, lines=header["lines"], source=text,
        inputs=list(chosen.fn.__code__.co_varnames[:chosen.fn.__code__.co_argcount]),
        outputs=["<yield>" if header["generator"] else "<return>"],
        shape="flat_map" if whole.kind is Kind.FLAT_MAP else "map", kind=kind,
        kind_source=source, resources=whole.demand(),
        cost=_cost(profiled.units[0]) if profiled else None)
    decomposition = Decomposition(**header, fallback=reason, samples=len(items), units=[report],
                                  notes=notes or [], profile=profiled)
    return DecomposedPipeline([whole], name=name, context=context, decomposition=decomposition)


def _with_resources(profile: PipelineProfile, units: list[Unit]) -> PipelineProfile:
    updated = [p.model_copy(update={"resources": u.demand()})
               for p, u in zip(profile.units, units, strict=True)]
    return profile.model_copy(update={"units": updated})


class _Job:
    """One decomposition in progress: the split and how its groups become units."""

    def __init__(self, fn: Callable[..., Any], chosen: Target, located: Located, split: Split,
                 bind: Callable[[Any], dict[str, Any]], context: ContextFactory | None,
                 name: str) -> None:
        self.fn, self.chosen, self.located, self.split = fn, chosen, located, split
        self.bind, self.context, self.name = bind, context, name
        self.notes: list[str] = list(split.notes)
        self.join = joiner(split)

    def units(self, groups: list[Group], demands: dict[Group, Demand]) -> list[Unit]:
        """One unit per group; a single group runs the original function itself."""
        if len(groups) == 1:
            only = groups[0]
            whole = unit(self.fn if self.chosen.is_method else self.chosen.fn,
                         name=self.split.unit_name(only))
            demand = demands.get(only, self._hinted(only))
            return [Unit(fn=whole.fn, name=whole.name, kind=whole.kind,
                         resources=demand.resources, io=demand.io, cpu_given=False)]
        return [make_unit(self.split, self.located, self.chosen, g, self.bind,
                          demands.get(g, self._hinted(g))) for g in groups]

    def by_source(self, groups: list[Group]
                  ) -> dict[Group, tuple[HintKind | None, KindSource, Demand]]:
        """Kinds without a sample: a hint, else ``io`` where a statement makes a waiting
        call (noted in the report); the other groups are left out (kind not known)."""
        kinds = {}
        for group in groups:
            waits = None if self.split.hint(group) else self.split.waits(group)
            if waits:
                kinds[group] = choose(None, None, waits)
                self.notes.append(f"{self.split.unit_name(group)} waits ({waits}): io by its "
                                  "source")
        return kinds

    def _hinted(self, group: Group) -> Demand:
        kind = self.split.hint(group)
        return resources_for(kind) if kind else Demand()

    def pipeline(self, units: list[Unit]) -> Pipeline:
        """The units as a plain pipeline (for profiling)."""
        return Pipeline(units, name=self.name, context=self.context)

    def finish(self, groups: list[Group], merges: list[Merge],
               kinds: Mapping[Group, tuple[HintKind | None, KindSource, Demand]],
               profile: PipelineProfile | None, samples: int = 0) -> DecomposedPipeline:
        """The pipeline for these groups and its report."""
        resources = {g: k[2] for g, k in kinds.items()}
        units = self.units(groups, resources)
        if profile is not None:
            profile = _with_resources(profile, units)
        reports = []
        for index, (group, made) in enumerate(zip(groups, units, strict=True)):
            kind, source, _ = kinds.get(group, (self.split.hint(group), "hint", None))
            if kind is None:
                source = "default"
            last = group.stop == len(self.split.statements)
            first_line, last_line = self.split.lines(group)
            reports.append(UnitReport(
                name=made.name, lines=(first_line, last_line),
                source=self.located.segment(first_line, last_line),
                inputs=self.split.carried(group),
                outputs=(["<yield>" if self.split.generator else "<return>"] if last
                         else self.split.outputs(group)),
                shape="flat_map" if made.kind is Kind.FLAT_MAP else "map", kind=kind,
                kind_source=source, resources=made.demand(),
                cost=_cost(profile.units[index]) if profile else None))
        decomposition = Decomposition(
            **_header(self.fn, self.chosen, self.located), samples=samples, units=reports,
            merges=merges, notes=self.notes, profile=profile)
        return DecomposedPipeline(units, name=self.name, context=self.context,
                                  decomposition=decomposition)

    def from_layout(self, layout: Decomposition) -> DecomposedPipeline:
        """The units a saved decomposition names, rebuilt on the current source."""
        header = _header(self.fn, self.chosen, self.located)
        if layout.function != header["function"] or layout.source_hash != header["source_hash"]:
            raise DecomposeError(
                f"layout: it was made for {layout.function} ({layout.source_hash}), not the "
                f"current {header['function']} ({header['source_hash']}); run `fitwork "
                "decompose` again")
        groups = groups_from_lines(self.split, [u.lines for u in layout.units])
        kinds = {g: (u.kind, u.kind_source, _resources(u.resources))
                 for g, u in zip(groups, layout.units, strict=True)}
        self.notes = list(layout.notes)
        return self.finish(groups, list(layout.merges), kinds, layout.profile, layout.samples)

    def picklable(self, groups: list[Group], item: Any) -> tuple[list[Group], list[Merge]]:
        """Run the first sample item through the units here; join across values that will
        not pickle (they could not cross to another process)."""
        merges: list[Merge] = []
        while len(groups) > 1:
            value = item
            bad: tuple[int, str] | None = None
            for at, group in enumerate(groups[:-1]):
                stage = stage_function(self.split, self.located, self.chosen, group, self.bind)
                try:
                    value = stage(value)
                except Exception as exc:
                    first, last = self.split.lines(group)
                    raise DecomposeError(
                        f"decompose: the first sample item fails in lines {first}-{last} "
                        f"({type(exc).__name__}: {exc}); give a sample the function runs on"
                    ) from exc
                try:
                    pickle.dumps(value, protocol=5)
                except Exception:
                    bad = (at, _unpicklable(value))
                    break
            if bad is None:
                break
            groups, merge = self.join(groups, bad[0], "pickle", bad[1])
            merges.append(merge)
        return groups, merges

    def measured(self, groups: list[Group], merges: list[Merge], items: list[Any],
                 fuse: bool) -> DecomposedPipeline:
        """Profile each unit on the sample, infer kinds, fuse, and profile the result."""
        with self.context() if self.context else contextlib.nullcontext():
            groups, more = self.picklable(groups, items[0])
        merges = merges + more
        # the pieces' kinds and times only: no piece is planned from this profile, so none
        # is timed under a loaded host (the joined units are, below)
        first = profile_pipeline(self.pipeline(self.units(groups, {})), items,
                                 samples=len(items), loaded=False)
        kinds = {g: choose(self.split.hint(g), p, self.split.waits(g))
                 for g, p in zip(groups, first.units, strict=True)}
        if not fuse:
            self.notes.append("fusion off: every safe cut kept")
            return self.finish(groups, merges, kinds, first, len(items))
        pieces = [Piece(kind=kinds[g][0] or "cpu", hinted=kinds[g][1] == "hint",
                        wall_s=p.wall_s, cpu_s=p.cpu_s, bytes_out=p.bytes_out)
                  for g, p in zip(groups, first.units, strict=True)]
        fused, decisions = plan_fusion(pieces)
        if not decisions:
            return self.finish(groups, merges, kinds, first, len(items))
        for decision in decisions:
            groups, merge = self.join(groups, decision.at, decision.rule, decision.reason,
                                      bytes=decision.bytes, transfer_s=decision.transfer_s,
                                      time_s=decision.time_s)
            log_merge(merges, merge)
        final_kinds: dict[Group, tuple[HintKind, KindSource, Demand]] = {}
        for group, piece in zip(groups, fused, strict=True):
            kind = piece.kind
            share = piece.cpu_s / piece.wall_s if piece.wall_s > 0 else None
            final_kinds[group] = (kind, "hint" if piece.hinted else "measured",
                                  resources_for(kind, share))
        units = self.units(groups, {g: k[2] for g, k in final_kinds.items()})
        again = profile_pipeline(self.pipeline(units), items, samples=len(items))
        for group, measured in zip(groups, again.units, strict=True):
            kind, source, _ = final_kinds[group]
            final_kinds[group] = (kind, source, resources_for(kind, measured.cpu_share))
        return self.finish(groups, merges, final_kinds, again, len(items))


def _resources(saved: dict[str, float]) -> Demand:
    """A demand as a report stores it (floats), back to its own types."""
    return Demand.from_dict(saved)


def _unpicklable(env: Any) -> str:
    if isinstance(env, dict):
        for key, value in env.items():
            try:
                pickle.dumps(value, protocol=5)
            except Exception as exc:
                return f"{key} cannot be pickled ({type(exc).__name__}: {exc})"
    return "the values passed on cannot be pickled"
