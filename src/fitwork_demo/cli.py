"""The ``fitwork demo`` command: OCR on this host in every layout, swept and compared."""

from __future__ import annotations

import re
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

from fitwork import Progress as RunProgress
from fitwork_demo.config import (
    DEFAULT_CAP_S,
    DEFAULT_HAND,
    DEFAULT_IMAGES,
    DEFAULT_IO_THREADS,
    DEFAULT_LATENCIES_MS,
    DEFAULT_REPEATS,
    DEFAULT_SAMPLES,
    DemoConfig,
)


class RichListener:
    """Shows the demo's steps as a spinner, each run as a bar, and a line per finished run."""

    def __init__(self, console: Console) -> None:
        self.bar = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"),
                            BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                            console=console, transient=True)
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
            self.bar.remove_task(self.step)
            self.step = None

    def phase(self, text: str) -> None:
        """A new step: the previous one is done."""
        self._end_step()
        self.bar.console.print(f"[dim]{text}[/dim]")
        self.step = self.bar.add_task(text, total=None, rate="")

    def run_started(self, label: str, total: int) -> None:
        """A bar for the run."""
        self._end_step()
        self.runs[label] = self.bar.add_task(label, total=total, rate="")

    def run_progress(self, label: str, snapshot: RunProgress) -> None:
        """Pages done and pages per second so far."""
        self.bar.update(self.runs[label], completed=snapshot.completed,
                        rate=f"{snapshot.rate:6.2f} items/s")

    def run_finished(self, label: str, outcome: str) -> None:
        """The run's bar goes; a line says how it went."""
        self.bar.remove_task(self.runs.pop(label))
        self.bar.console.print(f"{label}: {outcome}", highlight=False)


HAND = re.compile(r"^(\d+)x(\d+)(?:b(\d+))?$")


def _hand(values: tuple[str, ...]) -> tuple[tuple[int, int, int | None], ...]:
    layouts = []
    for value in values:
        match = HAND.match(value.lower())
        if match is None:
            raise click.BadParameter(f"{value!r}: give DETECTxRECOGNISE replicas and "
                                     "optionally bBATCH, e.g. 1x2 or 1x2b1",
                                     param_hint="--hand")
        detect, recognise, batch = match.groups()
        layouts.append((int(detect), int(recognise), int(batch) if batch else None))
    return tuple(layouts)


def _hand_text(detect: int, recognise: int, batch: int | None) -> str:
    return f"{detect}x{recognise}" + (f"b{batch}" if batch else "")


@click.command()
@click.option("--images", default=DEFAULT_IMAGES, show_default=True, type=click.IntRange(min=1),
              help="Pages each trial reads (the same pages in every trial).")
@click.option("--latency-ms", "latencies", multiple=True, type=click.FloatRange(min=0),
              default=DEFAULT_LATENCIES_MS, show_default=True,
              help="Store latency per request (read and write); repeat for several.")
@click.option("--repeats", default=DEFAULT_REPEATS, show_default=True,
              type=click.IntRange(min=1), help="Trials of every layout at each latency.")
@click.option("--max-processes", type=click.IntRange(min=1), default=None,
              help="Most monolith processes swept [default: 4 per core, or the plan's "
                   "monolithic replicas if more].")
@click.option("--io-threads", multiple=True, type=click.IntRange(min=1),
              default=DEFAULT_IO_THREADS, show_default=True,
              help="Threads per process of the threaded monolith; repeat for several.")
@click.option("--hand", "hand", multiple=True,
              default=[_hand_text(*entry) for entry in DEFAULT_HAND], show_default=True,
              help="DETECTxRECOGNISE replicas of a hand layout, with bBATCH for a "
                   "recognition batch size other than the declared one; repeat for several.")
@click.option("--cap-s", default=DEFAULT_CAP_S, show_default=True,
              type=click.FloatRange(min=0, min_open=True),
              help="Seconds after which a trial stops feeding pages.")
@click.option("--samples", default=DEFAULT_SAMPLES, show_default=True,
              type=click.IntRange(min=1), help="Pages the profiler measures each unit on.")
@click.option("--out", "out", type=click.Path(path_type=Path), default=Path("out/demo"),
              show_default=True, help="Folder for the run records, plans and HTML reports.")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed of the pages' text.")
@click.option("--quiet", "-q", is_flag=True, help="No progress display.")
def demo(images: int, latencies: tuple[float, ...], repeats: int, max_processes: int | None,
         io_threads: tuple[int, ...], hand: tuple[str, ...], cap_s: float, samples: int,
         out: Path, seed: int, quiet: bool) -> None:
    """OCR generated pages on this host in every layout, and compare the fitted plan with
    the best monolithic layout and the best hand layout a sweep finds.

    Offline: the pages are drawn with Pillow, served by a loopback store with a latency per
    request, and read by the ONNX models inside rapidocr-onnxruntime.  At each latency the
    split units are profiled and fitted to this host; then monoliths of 1..k processes,
    threaded monoliths, hand layouts and the fitted plan each read the same pages
    ``--repeats`` times, in alternating order.  Exits 1 when a check fails (two runs read
    a page differently, too few lines are read exactly, a run fails pages).
    """
    from fitwork import FitworkError
    from fitwork_demo.render import render
    from fitwork_demo.run import Quiet, run_demo

    console = Console(stderr=True)
    try:
        config = DemoConfig(images=images, latencies_ms=tuple(dict.fromkeys(latencies)),
                            repeats=repeats, max_processes=max_processes,
                            io_threads=tuple(io_threads), hand=_hand(hand), cap_s=cap_s,
                            out=out, seed=seed, samples=samples)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        if quiet:
            result = run_demo(config, Quiet())
        else:
            with RichListener(console) as listener:
                result = run_demo(config, listener)
    except FitworkError as exc:
        console.print(f"error: {exc}", soft_wrap=True, highlight=False, markup=False,
                      style="red")
        sys.exit(1)
    except KeyboardInterrupt:
        console.print("[red]interrupted[/red]")
        sys.exit(130)
    # soft wrap: each verdict stays one line, word for word what summary.json and the HTML
    # report say (the terminal wraps it for the eye)
    Console(width=max(Console().width, 160)).print(render(result), soft_wrap=True)
    if not result.ok:
        sys.exit(1)


if __name__ == "__main__":
    demo()
