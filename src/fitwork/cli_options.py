"""Click options that several commands share, so each reads its input the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def csv_strings_option(command: F) -> F:
    """``--csv-strings``, passed as ``csv_strings``: `run`, `profile` and `decompose` read
    a CSV input alike (numbers typed unless asked), so a unit is profiled on the values it
    will run on."""
    return click.option(
        "--csv-strings", is_flag=True,
        help="Keep every CSV field a string (by default a field that is a number arrives "
             "as an int or a float).")(command)
