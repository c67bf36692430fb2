"""Held out: a unit that queries an embedded database.

`prepare` writes a SQLite file of 200,000 rows (an indexed key, a group and a value) to a
temporary folder before the bench forks anything.  Each item names a key range; the unit
opens the file once per process, then per item runs one indexed range query that sums 400
rows' values by group in SQLite's C code (the GIL released while it steps), and a light unit
picks the largest group.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from bench_shape import Shape

from fitwork import Pipeline, unit

ROWS = 200_000
SPAN = 400
FOLDER: Path | None = None  # set by `prepare` before anything forks; workers inherit it
_OPEN: dict[int, sqlite3.Connection] = {}  # per process: a connection is not fork-safe


def prepare() -> Path:
    """Write the database once per interpreter, before anything forks; removed when the
    process that wrote it exits."""
    global FOLDER
    if FOLDER is None:
        folder = Path(tempfile.mkdtemp(prefix="fitwork-heldout-sqlite-"))
        with sqlite3.connect(folder / "rows.db") as db:
            db.execute("create table rows (key integer primary key, grp integer, value real)")
            db.executemany("insert into rows values (?, ?, ?)",
                           ((k, (k * 7919) % 23, ((k * 2654435761) % 1000) / 10.0)
                            for k in range(ROWS)))
        owner = os.getpid()
        atexit.register(
            lambda: os.getpid() == owner and shutil.rmtree(folder, ignore_errors=True))
        FOLDER = folder
    return FOLDER


def _connection() -> sqlite3.Connection:
    """This process's read-only connection to the database."""
    pid = os.getpid()
    if pid not in _OPEN:
        _OPEN.clear()
        path = prepare() / "rows.db"
        _OPEN[pid] = sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                     check_same_thread=False)
    return _OPEN[pid]


@unit
def key_range(number: int) -> tuple[int, int]:
    """The key range item ``number`` reads."""
    start = (number * 104_729) % (ROWS - SPAN)
    return start, start + SPAN


@unit
def group_sums(bounds: tuple[int, int]) -> list[tuple[int, float]]:
    """The range's values summed by group, by one indexed query."""
    query = ("select grp, sum(value) from rows where key >= ? and key < ? "
             "group by grp order by grp")
    return [(int(g), float(s)) for g, s in _connection().execute(query, bounds)]


@unit
def largest(sums: list[tuple[int, float]]) -> float:
    """The largest group's sum."""
    return max(s for _, s in sums)


SHAPE = Shape(Pipeline(key_range, group_sums, largest, name="sqlite_lookup"),
              "queries an embedded database: an indexed SQLite range query of 400 rows, "
              "summed by group", 6000, (1, 2, 3, 4),
              {"key_range": (1,), "group_sums": (1, 2, 3), "largest": (1,)})
