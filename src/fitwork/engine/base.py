"""The engine contract: options in, a `RunResult` out that streams outputs and holds the record."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fitwork.errors import UnitDefinitionError

if TYPE_CHECKING:
    from fitwork.telemetry.record import Progress, RunRecord
    from fitwork.workload.pipeline import Pipeline


@dataclass(frozen=True)
class RunOptions:
    """How a run behaves, whatever engine runs it.

    ``gpus`` lists the GPU ids replicas of GPU units are spread over (each replica sees one
    through ``CUDA_VISIBLE_DEVICES``); ``None`` takes what this process may see.
    ``address`` is the cluster to join, for engines that run on one (Ray); ``None`` joins the
    one ``RAY_ADDRESS`` names, or starts one on this host.  ``placements`` gives, per unit,
    ``(device class, node type, replicas)`` from a plan, which the Ray engine turns into
    resource requests and node-type label selectors.
    """

    ordered: bool = False
    dead_letter: Path | None = None
    max_failures: int | None = None
    max_attempts: int = 3
    channel_capacity: int = 8
    progress: Callable[[Progress], None] | None = None
    progress_interval: float = 0.1
    sample_interval: float = 0.1
    gpus: tuple[str, ...] | None = None
    address: str | None = None
    placements: dict[str, list[tuple[str, str, int]]] | None = None


class RunResult:
    """A run in progress: iterate it for outputs; ``record`` is the run record once it ends.

    Use it as a context manager (or iterate it to the end) so that the engine's processes
    and shared memory are released even when the caller stops early.
    """

    def __init__(self, outputs: Iterator[Any], finish: Callable[[], RunRecord],
                 close: Callable[[], None],
                 worker_pids: Callable[[], list[int]] | None = None) -> None:
        self._outputs = outputs
        self._finish = finish
        self._close = close
        self._worker_pids = worker_pids or list
        self._record: RunRecord | None = None

    def worker_pids(self) -> list[int]:
        """Process ids of the workers running now (for operators, and for fault tests)."""
        return self._worker_pids()

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
        """The run record; drains any outputs not yet read (they are dropped)."""
        if self._record is None:
            for _ in self._outputs:
                pass
            self._record = self._finish()
        return self._record

    def close(self) -> None:
        """Stop the run if it is still going and release everything it holds."""
        self._close()


class Engine(Protocol):
    """Anything that can run a pipeline over a source."""

    name: str

    def run(self, pipeline: Pipeline, source: Iterable[Any], options: RunOptions) -> RunResult:
        """Start running and return at once; outputs stream from the result."""
        ...


def get_engine(name: str) -> Engine:
    """The engine registered as ``name`` (``local``; ``ray`` once its extra is installed)."""
    if name == "local":
        from fitwork.engine.local import LocalEngine

        return LocalEngine()
    if name == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise UnitDefinitionError(
                "engine 'ray' needs Ray: install the extra with pip install 'fitwork[ray]'"
            ) from None
        from fitwork.engine.ray import RayEngine

        return RayEngine()
    raise UnitDefinitionError(f"engine {name!r} is unknown; the engines are: local, ray")
