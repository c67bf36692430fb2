"""Whether this process is profiling: a unit whose calls have side effects can skip them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

PROFILING = "FITWORK_PROFILING"
"""The environment variable `fitwork.profile_pipeline` sets to ``1`` while it measures (its
forked and spawned children inherit it), and restores after."""


def profiling_now() -> bool:
    """Whether the calling code runs under `fitwork.profile_pipeline` (`fitwork profile`,
    `fitwork decompose` with a sample, `fitwork run --decompose` without a file): each unit
    is then called many times on the same samples (see the README), so a unit that writes,
    sends or charges something can skip that while this is true."""
    return os.environ.get(PROFILING) == "1"


@contextlib.contextmanager
def marked() -> Iterator[None]:
    """`profiling_now` is true inside, in this process and every child started inside."""
    before = os.environ.get(PROFILING)
    os.environ[PROFILING] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PROFILING, None)
        else:
            os.environ[PROFILING] = before
