"""Hints a user leaves in a monolithic function: ``hint("gpu")`` calls and ``# fitwork:`` comments.

Both mark one top-level statement: a ``hint(...)`` call marks the statement after it, a
``# fitwork: KIND`` comment marks the statement on whose lines it stands, or the statement
that starts on the next line when the comment stands alone.  A hinted statement's unit gets
the kind's resources and never fuses with a differently-kinded neighbour.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from fitwork.errors import UnitDefinitionError
from fitwork.resources import Resources

HintKind = Literal["cpu", "io", "gpu"]
KINDS: tuple[HintKind, ...] = ("cpu", "io", "gpu")
IO_CONCURRENCY = 8
"""Calls one I/O replica keeps in flight."""

COMMENT = re.compile(r"#\s*fitwork\s*:\s*([A-Za-z]+)\b")

F = TypeVar("F", bound=Callable[..., Any])
CONTEXT_ATTR = "__fitwork_context__"
"""The attribute `with_context` sets on a function: its run context's factory."""


def hint(kind: str, /) -> None:
    """Mark the next statement of a function ``decompose`` splits as ``cpu``, ``io`` or ``gpu``.

    A no-op when the function runs; ``decompose`` reads it from the source.
    """
    check_kind(kind, "hint()")


def check_kind(kind: str, where: str) -> HintKind:
    """``kind`` as a hint kind, or an error naming the kinds there are."""
    for known in KINDS:
        if kind == known:
            return known
    raise UnitDefinitionError(
        f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}; "
        "write e.g. fitwork.hint('gpu') or '# fitwork: io'")


@dataclass(frozen=True)
class Demand:
    """What one replica of a decomposed unit holds, and how many calls it keeps in flight."""

    resources: Resources = field(default_factory=lambda: Resources(cpu=1.0))
    io: int = 0

    def as_dict(self) -> dict[str, float]:
        """The figures as a report stores them (``io`` beside the resources)."""
        return {**self.resources.as_dict(), **({"io": float(self.io)} if self.io else {})}

    @classmethod
    def from_dict(cls, saved: dict[str, float]) -> Demand:
        """The inverse of `as_dict`."""
        return cls(Resources.from_dict(saved), int(saved.get("io", 0)))


def resources_for(kind: HintKind, cpu_share: float | None = None) -> Demand:
    """What one replica of a unit of this kind holds.

    An I/O replica holds the CPU its ``IO_CONCURRENCY`` calls use together (measured CPU
    share x concurrency, at most one core under the GIL; 0.25 when unmeasured).
    """
    if kind == "gpu":
        return Demand(Resources(cpu=1.0, gpu=1.0))
    if kind == "io":
        if cpu_share is None:
            return Demand(Resources(cpu=0.25), IO_CONCURRENCY)
        cores = -(-cpu_share * IO_CONCURRENCY // 0.05) * 0.05
        return Demand(Resources(cpu=round(min(1.0, max(0.05, cores)), 2)), IO_CONCURRENCY)
    return Demand()


def with_context(factory: Callable[[], AbstractContextManager[Any]]) -> Callable[[F], F]:
    """Attach a run context (see `Pipeline`) that ``decompose`` gives the pipeline it makes.

    Use it on a plain function that needs, say, a test server up while it runs, so that
    ``fitwork run MODULE:FUNCTION --decompose`` can start it.  Returns the function unchanged.
    """
    def attach(fn: F) -> F:
        setattr(fn, CONTEXT_ATTR, factory)  # any callable: read back with getattr
        return fn

    return attach
