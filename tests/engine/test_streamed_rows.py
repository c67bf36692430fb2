"""A local reader hands a shard's rows on as it reads them (`fitwork.io.shards.STREAM_ROWS`
at a time) and the run core hears of them, so a death mid-shard redoes only the rows after
the last chunk handed on, not the shard: exactly once, into parts and to the caller."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import fitwork
from fitwork import Pipeline, Source, unit
from fitwork.engine.parts import read_parts
from fitwork.io.shards import (
    STREAM_ROWS,
    Slice,
    file_shards,
    read_shard,
    read_shard_tolerant,
    read_slice,
)

ROWS = 6000
KILLERS = (1700, 4100, 5300)  # each kills the first worker that meets it


@unit(cpu=0.5, name="count")
def count(row: dict[str, Any]) -> dict[str, int]:
    """The row's number; each call leaves a line in its worker's log; a killer row kills
    the first worker that meets it."""
    n = int(row["n"])
    with open(os.path.join(row["logs"], str(os.getpid())), "a") as log:
        log.write(f"{n}\n")
    if n in KILLERS:
        try:
            os.close(os.open(os.path.join(row["logs"], f"mark-{n}"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGKILL)
    return {"n": n}


def calls(logs: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in logs.iterdir()
               if not p.name.startswith("mark-"))


@pytest.mark.parametrize("into", ["parts", "caller"])
@pytest.mark.parametrize("spares", [1, 0])
def test_a_death_mid_shard_redoes_only_rows_not_handed_on(into: str, spares: int,
                                                          tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"n": n, "logs": str(logs)}) + "\n"
                            for n in range(ROWS)))
    source = Source.files(str(path), split_bytes=path.stat().st_size // 2 + 1)  # 2 shards
    assert len(source.shards) == 2
    out = tmp_path / "out"
    output = fitwork.Sink.files(out) if into == "parts" else None
    with fitwork.run(Pipeline(count), source, engine="local", workers={"count": 2},
                     output=output, spares=spares) as result:
        outputs = list(result)
    rows = outputs if into == "caller" else list(read_parts(out))
    got = [int(r["n"]) for r in rows]
    assert Counter(got) == Counter(range(ROWS))  # exactly once
    assert result.record.worker_restarts == len(KILLERS)
    redone = calls(logs) - ROWS
    # each death redoes at most the rows after the last chunk handed on (not the up to
    # 3,000 of its shard read before it), and the chunk in flight
    assert redone <= len(KILLERS) * 2 * STREAM_ROWS, redone


def test_a_clean_sharded_run_settles_every_shard_whole(tmp_path: Path) -> None:
    """Streamed chunks and the rest of a shard weigh exactly the shard: every item
    completes, with no death to itemize it."""
    logs = tmp_path / "logs"
    logs.mkdir()
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"n": n + ROWS, "logs": str(logs)}) + "\n"
                            for n in range(ROWS)))
    source = Source.files(str(path), split_bytes=path.stat().st_size // 3 + 1)
    with fitwork.run(Pipeline(count), source, engine="local", workers={"count": 2}) as result:
        got = sorted(r["n"] for r in result)
    assert got == list(range(ROWS, 2 * ROWS)) and calls(logs) == ROWS
    assert result.record.items_completed == len(source.shards) == 3
    assert result.record.worker_restarts == 0


@pytest.mark.parametrize("block", [7, 97, 4096, 1 << 16])
def test_a_slice_passes_rows_in_blocks_as_it_would_line_by_line(
        tmp_path: Path, block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows passed a block at a time (`fitwork.io.shards._skip_rows`) are the rows a line
    by line reading passes: blank and white-space lines (no rows), CRLF, a byte-order mark,
    lines that start with a space or hold an array, a line longer than the block, shards
    that start and end mid-line, blocks that end anywhere; and alike lines, which pass
    by counting."""
    import random

    import fitwork.io.shards as shards

    monkeypatch.setattr(shards, "SKIP_BLOCK", block)
    pick = random.Random(block)
    lines = []
    for n in range(4000):
        kind = pick.random() if n >= 2000 else 1.0  # alike lines first: two counts a block
        if kind < 0.05:
            lines.append(pick.choice(["", " ", "\t", "\r", "  \r"]))
        elif kind < 0.1:
            lines.append(" " + json.dumps([n, "x" * pick.randrange(40)]))
        elif kind < 0.12:
            lines.append(json.dumps({"n": n}) + "\r")
        else:
            lines.append(json.dumps({"n": n, "pad": "y" * pick.randrange(30)}))
    lines[2500] = json.dumps({"n": 2500, "long": "z" * 70_000})
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode())
    for shard in file_shards(str(path), 20_000):
        rows = list(read_shard(shard))
        for lo in sorted({0, 1, 2, len(rows) // 3, len(rows) // 2, len(rows) - 1, len(rows),
                          *pick.sample(range(max(1, len(rows))), min(5, len(rows)))}):
            assert list(read_slice(read_shard, Slice(shard, lo, None))) == rows[lo:], lo
            assert list(read_slice(read_shard, Slice(shard, lo, lo + 3))) == rows[lo:lo + 3]


def test_a_slice_of_a_jsonl_shard_skips_its_first_rows_unparsed(tmp_path: Path) -> None:
    """`read_slice` yields what slicing the whole shard's rows yields (blank lines are no
    rows), for shards that start mid-file and slices open or closed."""
    path = tmp_path / "in.jsonl"
    lines = [json.dumps({"n": n}) if n % 7 else "" for n in range(300)]
    path.write_text("\n".join(lines) + "\n")
    for shard in file_shards(str(path), 1000):
        rows = list(read_shard(shard))
        for lo, hi in [(0, None), (1, None), (5, 9), (len(rows) - 1, None), (3, 300)]:
            piece = Slice(shard, lo, hi)
            assert list(read_slice(read_shard, piece)) == rows[lo:hi]
            assert list(read_slice(read_shard_tolerant, piece)) == rows[lo:hi]
