"""The engine contract: a pipeline, a source and a placement in; a `RunResult` out.

Every engine passes one contract suite (``tests/engine/``): the outputs of a serial run,
each exactly once, whatever fails, in order when asked.  An engine is a thin shell around
the run core (`fitwork.engine.core`); this module only says what the caller sees.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fitwork.engine.options import RunOptions
    from fitwork.placement import Placement
    from fitwork.telemetry.record import RunRecord
    from fitwork.workload.pipeline import Pipeline


class Run(Protocol):
    """What an engine's shell offers the result: outputs, record, workers, resizing."""

    def batches(self) -> Generator[list[Any], None, None]: ...
    def record(self) -> RunRecord: ...
    def close(self) -> None: ...
    def worker_pids(self, unit: str | None = None) -> list[int]: ...
    def resize(self, unit: str, replicas: int) -> None: ...
    def settled_spans(self, consumed: int) -> list[tuple[int, int]] | None: ...


class RunResult:
    """A run in progress: iterate it for outputs; ``record`` is the run record once it ends.

    Use it as a context manager (or iterate it to the end) so that the engine's processes
    and shared memory are released even when the caller stops early.
    """

    def __init__(self, run: Run) -> None:
        self._run = run
        self._batches = run.batches()
        # flattened in C: a generator resumed per output would cost the driver more than
        # the rest of its per-item work (the loop yields one list per turn)
        self._outputs: Iterator[Any] = itertools.chain.from_iterable(self._batches)
        self._record: RunRecord | None = None

    def worker_pids(self, unit: str | None = None) -> list[int]:
        """Process ids of the workers running now, of one unit if named (for operators,
        and for fault tests)."""
        return self._run.worker_pids(unit)

    def settled_spans(self, consumed: int) -> list[tuple[int, int]] | None:
        """With ``spans=True``: the source spans (first index, count) whose outputs are all
        among the first ``consumed`` outputs iterated, not returned before; None when the
        ``consumed``-th output is not the last of a span (the outputs so far hold part of
        one).  A journal records them once those outputs are durably written."""
        return self._run.settled_spans(consumed)

    def sync_parts(self) -> dict[str, list[tuple[int, int, int]]]:
        """With a sink: make the parts written since the last call durable, and return
        their committed byte ranges (what a journal records); ``{}`` without one."""
        parts = getattr(self._run, "parts", None)
        return parts.sync() if parts is not None else {}

    def resize(self, unit: str, replicas: int) -> None:
        """Run ``replicas`` replicas of ``unit`` from now on (added or retired live)."""
        self._run.resize(unit, replicas)

    def turns(self) -> Iterator[list[Any]]:
        """The outputs as the engine hands them out, a list per turn of its loop; with
        ``spans=True`` also an empty list every `fitwork.engine.shell.QUIET_TURN_S` while
        none come, a moment to journal the spans settled meanwhile.  Iterate this or the
        result itself, not both."""
        return self._batches

    def __iter__(self) -> Iterator[Any]:
        return self._outputs

    def __enter__(self) -> RunResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def outputs(self) -> list[Any]:
        """Every remaining output, as a list (drains the run)."""
        return list(self._outputs)

    @property
    def record(self) -> RunRecord:
        """The run record; drains any outputs not yet read (they are dropped).

        After a run that stopped early (closed, interrupted, aborted) it is the record of
        what happened until then, its ``status`` saying so.
        """
        if self._record is None:
            try:
                for _ in self._batches:
                    pass
            except Exception:
                pass  # the error was raised to whoever iterated; the record says it
            self._record = self._run.record()
        return self._record

    def close(self) -> None:
        """Stop the run if it is still going and release everything it holds."""
        self._batches.close()
        self._run.close()


class Engine(Protocol):
    """Anything that can run a pipeline over a source."""

    name: str
    options: type

    def run(self, pipeline: Pipeline, source: Iterable[Any], placement: Placement,
            options: RunOptions, engine_options: Any) -> RunResult:
        """Start running and return at once; outputs stream from the result."""
        ...
