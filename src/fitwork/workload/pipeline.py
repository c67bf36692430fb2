"""`Pipeline`: units joined by channels; a chain today, stored as stages with edges for a DAG."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from fitwork.errors import InputError, UnitDefinitionError
from fitwork.resources import Resources
from fitwork.workload.kernel import Failed, Kernel
from fitwork.workload.retry import NO_RETRY
from fitwork.workload.unit import Kind, Unit, unit


def _through(kernels: list[Kernel], index: int, item: Any) -> Iterator[Any]:
    """Every output ``item`` gives from stage ``index`` to the end, one stage at a time."""
    if index == len(kernels):
        yield item
        return
    kernel = kernels[index]
    if kernel.batched:
        (raw,), _ = kernel.call_batch([item])
        if type(raw) is Failed:
            raise raw.error
    else:
        raw = kernel.call(item)
    for output in kernel.outputs(item, raw):
        yield from _through(kernels, index + 1, output)


class Pipeline:
    """Units in order; each item flows from the first unit to the last.

    ``context`` is an optional zero-argument callable returning a context manager that the
    driver enters around a run, before any worker starts (start a test server, set an
    environment variable the workers inherit).
    """

    def __init__(
        self,
        *units: Unit | Callable[..., Any] | Iterable[Unit | Callable[..., Any]],
        name: str = "pipeline",
        context: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        flat: list[Unit | Callable[..., Any]] = []
        for entry in units:
            if isinstance(entry, Unit) or callable(entry):
                flat.append(entry)
            else:
                flat.extend(entry)
        if not flat:
            raise UnitDefinitionError(f"pipeline {name!r}: needs at least one unit")
        self.units: tuple[Unit, ...] = tuple(unit(u) for u in flat)
        names = [u.name for u in self.units]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise UnitDefinitionError(
                f"pipeline {name!r}: unit names must be unique, {duplicated} repeat; "
                "pass unit(fn, name=...) to tell them apart"
            )
        self.name = name
        self.context = context

    @property
    def edges(self) -> list[tuple[int, int]]:
        """(upstream, downstream) stage indices; a chain links each stage to the next."""
        return [(i, i + 1) for i in range(len(self.units) - 1)]

    def unit_named(self, name: str) -> Unit:
        """The unit called ``name``, or an error listing the names there are."""
        for u in self.units:
            if u.name == name:
                return u
        raise UnitDefinitionError(
            f"pipeline {self.name!r} has no unit {name!r}; its units are "
            f"{', '.join(u.name for u in self.units)}"
        )

    def run_context(self) -> AbstractContextManager[Any]:
        """The driver-side context to enter around a run (a no-op if none was given)."""
        return self.context() if self.context else contextlib.nullcontext()

    def serial(self, source: Iterable[Any]) -> Iterator[Any]:
        """Run every unit in this process, one item at a time: the reference semantics.

        A unit's retry policy applies; an item that still fails raises its error here.
        """
        kernels = [Kernel(u) for u in self.units]
        for item in source:
            yield from _through(kernels, 0, item)

    def take(self, source: Iterable[Any], n: int) -> list[Any]:
        """The first ``n`` outputs, computed in this process (`serial`) from as few source
        items as give them: a quick look at what the pipeline makes, no workers started."""
        if n < 0:
            raise InputError(f"take({n}): n must be 0 or more")
        with self.run_context():
            return list(itertools.islice(self.serial(source), n))

    def fused(self, name: str | None = None, io: int = 0) -> Pipeline:
        """The monolithic baseline: one unit that runs every stage in turn for each item.

        It demands what a container bundling the stages holds: the largest core and GPU
        demand among them (the stages run in turn, not at once) and the sum of their memory;
        it is a flat-map, since a filter or a flat-map inside may give zero or many outputs
        per item (a map when every stage is an unbatched map).  ``io=N`` gives each replica
        N threads, so the monolith overlaps its own waiting (the threaded monolith a careful
        engineer writes).
        """
        stages = self
        # a chain of plain maps fuses into a map: one output per item, and none of a
        # flat-map's per-output books (child paths and weights) on the way
        maps = all(u.kind is Kind.MAP and not u.batch_size for u in self.units)

        class Fused:
            def __init__(self) -> None:
                self.kernels = [Kernel(u) for u in stages.units]
                # a plain map (no retry, timeout or coroutine) is its bare function
                self.calls = [k.fn if k.plain else k.call for k in self.kernels]

            def __call__(self, item: Any) -> Any:
                if maps:
                    for call in self.calls:
                        item = call(item)
                    return item
                return list(_through(self.kernels, 0, item))

        resources = Resources(
            cpu=max(u.resources.cpu for u in self.units),
            gpu=max(u.resources.gpu for u in self.units),
            memory=sum(u.resources.memory for u in self.units))
        fused = Unit(fn=Fused, name=name or f"{self.name}_fused",
                     kind=Kind.MAP if maps else Kind.FLAT_MAP,
                     resources=resources, io=io, retry=NO_RETRY,
                     cpu_given=any(u.cpu_given for u in self.units))
        return Pipeline(fused, name=fused.name, context=self.context)

    def __repr__(self) -> str:
        return f"Pipeline({' -> '.join(u.name for u in self.units)}, name={self.name!r})"
