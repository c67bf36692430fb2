"""What the commands share: one-line errors, SIGTERM as an exception, ``--workers``."""

from __future__ import annotations

import sys
from typing import NoReturn

import click
from rich.console import Console


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an exception so outputs close validly and the record is written."""


def on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def fail(message: object, code: int = 1) -> NoReturn:
    """Print one line to stderr, with no markup read into it, and exit with ``code``."""
    Console(stderr=True).print(f"error: {message}", soft_wrap=True, highlight=False,
                               markup=False, style="red")
    sys.exit(code)


def parse_workers(values: tuple[str, ...]) -> dict[str, int]:
    """``--workers UNIT=N`` pairs as a dict; a usage error for a malformed one."""
    workers: dict[str, int] = {}
    for value in values:
        name, sep, count = value.partition("=")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise click.BadParameter(f"{value!r}: write UNIT=N with N >= 1, e.g. decode=2",
                                     param_hint="--workers")
        workers[name] = int(count)
    return workers


class Null:
    """A context that does nothing (no progress bar)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
