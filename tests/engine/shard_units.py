"""Module-level units for the sharded source and sink tests (importable by every engine)."""

from __future__ import annotations

import time
from typing import Any

from fitwork import Pipeline, unit


@unit(cpu=0.5)
def value(row: dict[str, Any]) -> int:
    if row["n"] % 50 == 0:
        time.sleep(0.005)  # the run lasts long enough for kills to land inside it
    return int(row["n"])


@unit(kind="filter", cpu=0.5)
def keep(n: int) -> bool:
    return n % 5 != 0


@unit(cpu=0.5)
def spread(n: int) -> Any:
    yield {"n": n, "part": 0}
    if n % 3 == 0:
        yield {"n": n, "part": 1}


pipeline = Pipeline(value, keep, spread, name="sharded")


@unit(cpu=0.5)
def picky(row: dict[str, Any]) -> int:
    if row["n"] % 97 == 0:
        raise ValueError(f"no {row['n']}")
    return int(row["n"])


picky_pipeline = Pipeline(picky, keep, spread, name="picky")


def expected(numbers: range) -> list[tuple[int, int]]:
    """The (n, part) pairs the pipeline gives for ``numbers``, in order."""
    return [(n, part) for n in numbers if n % 5 for part in ((0, 1) if n % 3 == 0 else (0,))]
