"""The ``fitwork demo`` command: OCR run monolithic and fitted on this host, compared."""

from __future__ import annotations

import sys
from pathlib import Path
from types import TracebackType

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from fitwork.demo.config import DEFAULT_IMAGES, DEFAULT_LATENCY_MS, DemoConfig
from fitwork.telemetry.record import Progress as RunProgress


class RichListener:
    """Shows the demo's steps as a spinner and each run as a bar with items/s."""

    def __init__(self, console: Console) -> None:
        self.bar = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"),
                            BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                            console=console, transient=False)
        self.step: TaskID | None = None
        self.runs: dict[str, TaskID] = {}

    def __enter__(self) -> RichListener:
        self.bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._end_step()
        self.bar.stop()

    def _end_step(self) -> None:
        if self.step is not None:
            self.bar.update(self.step, total=1, completed=1)
            self.step = None

    def phase(self, text: str) -> None:
        """A new step: the previous one is done."""
        self._end_step()
        self.step = self.bar.add_task(text, total=None, rate="")

    def run_started(self, label: str, total: int) -> None:
        """A bar for the run."""
        self._end_step()
        self.runs[label] = self.bar.add_task(f"{label} run", total=total, rate="")

    def run_progress(self, label: str, snapshot: RunProgress) -> None:
        """Pages done and pages per second so far."""
        self.bar.update(self.runs[label], completed=snapshot.completed,
                        rate=f"{snapshot.rate:6.2f} items/s")

    def run_finished(self, label: str) -> None:
        """Nothing more to show for the run."""


@click.command()
@click.option("--images", default=DEFAULT_IMAGES, show_default=True, type=click.IntRange(min=1),
              help="Pages to generate and read.")
@click.option("--latency-ms", default=DEFAULT_LATENCY_MS, show_default=True,
              type=click.FloatRange(min=0),
              help="Latency the store adds to every request (read and write).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes for the monolithic run [default: the plan's monolithic "
                   "replicas, the core count on a host without a GPU].")
@click.option("--out", "out", type=click.Path(path_type=Path), default=Path("out/demo"),
              show_default=True, help="Folder for the run records, plan and HTML report.")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed of the pages' text.")
@click.option("--quiet", "-q", is_flag=True, help="No progress display.")
def demo(images: int, latency_ms: float, workers: int | None, out: Path, seed: int,
         quiet: bool) -> None:
    """OCR generated pages two ways on this host, monolithic and fitted, and compare them.

    Offline: the pages are drawn with Pillow, served by a loopback store with a latency per
    request, and read by the ONNX models inside rapidocr-onnxruntime.  Exits 1 when a check
    fails (the two runs disagree, or too few lines are read exactly).
    """
    from fitwork.demo.render import render
    from fitwork.demo.run import Quiet, run_demo
    from fitwork.errors import FitworkError

    console = Console(stderr=True)
    config = DemoConfig(images=images, latency_ms=latency_ms, workers=workers, out=out,
                        seed=seed)
    try:
        if quiet:
            result = run_demo(config, Quiet())
        else:
            with RichListener(console) as listener:
                result = run_demo(config, listener)
    except FitworkError as exc:
        console.print(f"[red]error[/red]: {exc}", soft_wrap=True, highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        console.print("[red]interrupted[/red]")
        sys.exit(130)
    Console().print(render(result))
    if not result.ok:
        sys.exit(1)


if __name__ == "__main__":
    demo()
