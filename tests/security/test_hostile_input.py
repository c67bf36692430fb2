"""Hostile input, fuzzed: every reader ends in one line naming the file and line, or reads on."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fitwork.io.inputs as fio
from fitwork.errors import InputError
from fitwork.io.inputs import read_items

EXAMPLES = int(os.environ.get("FITWORK_FUZZ_EXAMPLES", "0"))
"""Set FITWORK_FUZZ_EXAMPLES to search further than the few examples each test runs by default."""
FUZZ = settings(derandomize=True, max_examples=EXAMPLES or 40, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = (st.none() | st.booleans() | st.integers(-10**12, 10**12)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fitwork-fuzz-") as name:
        yield Path(name)


def read_until_error(path: Path) -> tuple[list[Any], InputError | None]:
    """Every item `read_items` yields, and the InputError that ended it (if any).

    Any other exception escapes and fails the test: that is the property under test.
    """
    got: list[Any] = []
    try:
        for item in read_items(path):
            got.append(item)
    except InputError as exc:
        message = str(exc)
        assert message.isprintable(), message  # one line, no control characters
        assert str(path) in message, message
        return got, exc
    return got, None


def jsonl(items: list[Any]) -> list[bytes]:
    return [json.dumps(item, ensure_ascii=False).encode() + b"\n" for item in items]


# corruptions of one JSON Lines line; each makes that line unreadable
CORRUPTIONS = {
    "invalid utf-8": lambda line: line[:1] + b"\xff\xfe" + line[1:],
    "nul byte": lambda line: line.rstrip(b"\n") + b"\x00\n",
    "truncated value": lambda line: b'{"cut": [1, 2' + b"\n",
    "deep nesting": lambda line: b"[" * 200_000 + b"]" * 200_000 + b"\n",
    "integer past the digit limit": lambda line: b"1" * 5_000 + b"\n",
    "huge line": lambda line: b'"' + b"x" * 5_000 + b'"\n',
    "lone surrogate escape": lambda line: line[:1] + b"\xed\xa0\x80" + line[1:],
}


@FUZZ
@given(items=st.lists(values, min_size=1, max_size=12), data=st.data(),
       corruption=st.sampled_from(sorted(CORRUPTIONS)))
def test_jsonl_bad_line_is_named_and_lines_before_it_are_read(
        items: list[Any], data: st.DataObject, corruption: str) -> None:
    bad = data.draw(st.integers(1, len(items)), label="bad line")
    lines = jsonl(items)
    lines[bad - 1] = CORRUPTIONS[corruption](lines[bad - 1])
    for root in folder():
        path = root / "items.jsonl"
        path.write_bytes(b"".join(lines))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fio, "MAX_LINE_BYTES", 4_096)
            got, error = read_until_error(path)
        assert error is not None, corruption
        assert str(error).startswith(f"input {path}:{bad}: "), str(error)
        assert got == items[:bad - 1]


@FUZZ
@given(items=st.lists(values, min_size=1, max_size=12), data=st.data())
def test_jsonl_truncated_anywhere_reads_every_whole_line(items: list[Any],
                                                         data: st.DataObject) -> None:
    whole = b"".join(jsonl(items))
    cut = data.draw(st.integers(0, len(whole)), label="cut at")
    kept = whole[:cut]
    complete = kept.count(b"\n")
    for root in folder():
        path = root / "items.jsonl"
        path.write_bytes(kept)
        got, error = read_until_error(path)
        assert got[:complete] == items[:complete]
        if error is not None:  # only the partial last line may be refused, by its number
            assert str(error).startswith(f"input {path}:{complete + 1}: "), str(error)
            assert len(got) == complete


@FUZZ
@given(blob=st.binary(max_size=2_000), suffix=st.sampled_from([".jsonl", ".csv", ".txt"]))
def test_any_bytes_give_items_or_one_line(blob: bytes, suffix: str) -> None:
    for root in folder():
        path = root / f"noise{suffix}"
        path.write_bytes(blob)
        read_until_error(path)


fields = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\n\x00"),
                 max_size=12)


@FUZZ
@given(width=st.integers(1, 4), data=st.data())
def test_csv_bad_row_is_named_and_rows_before_it_are_read(width: int,
                                                          data: st.DataObject) -> None:
    header = [f"c{i}" for i in range(width)]
    rows = data.draw(st.lists(st.lists(fields, min_size=width, max_size=width), min_size=1,
                              max_size=10), label="rows")
    rows = [row for row in rows if any(row)] or [["x"] * width]
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    lines = text.getvalue().encode().splitlines(keepends=True)
    bad = data.draw(st.integers(1, len(rows)), label="bad row")
    how = data.draw(st.sampled_from(["invalid utf-8", "too few fields", "too many fields"]))
    if how == "invalid utf-8":
        lines[bad] = b"\xff" + lines[bad]
    elif how == "too many fields":
        lines[bad] = lines[bad].rstrip(b"\n") + b",extra\n"
    elif width > 1:
        lines[bad] = b"only\n"
    else:
        lines[bad] = b"a,b\n"
    for root in folder():
        path = root / "items.csv"
        path.write_bytes(b"".join(lines))
        got, error = read_until_error(path)
        assert error is not None
        assert str(error).startswith(f"input {path}:{bad + 1}: "), str(error)
        assert got == [dict(zip(header, row, strict=True)) for row in rows[:bad - 1]]


@FUZZ
@given(width=st.integers(1, 3), data=st.data())
def test_csv_truncated_or_holding_nul_never_escapes(width: int, data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.lists(st.text(max_size=10), min_size=width, max_size=width),
                              max_size=8), label="rows")
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow([f"c{i}" for i in range(width)])
    writer.writerows(rows)
    whole = text.getvalue().encode("utf-8", "surrogatepass")
    cut = data.draw(st.integers(0, len(whole)), label="cut at")
    spot = data.draw(st.integers(0, cut), label="nul at")
    blob = whole[:spot] + b"\x00" + whole[spot:cut]
    for root in folder():
        path = root / "items.csv"
        path.write_bytes(blob)
        read_until_error(path)


@pytest.fixture(scope="module")
def parquet_bytes() -> bytes:
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    table = pyarrow.table({"n": list(range(3_000)), "s": [f"row {i}" for i in range(3_000)]})
    sink = io.BytesIO()
    parquet.write_table(table, sink, row_group_size=1_000)
    return sink.getvalue()


@settings(FUZZ, max_examples=EXAMPLES or 30)
@given(data=st.data())
def test_parquet_truncated_or_flipped_never_escapes(parquet_bytes: bytes,
                                                    data: st.DataObject) -> None:
    blob = bytearray(parquet_bytes)
    if data.draw(st.booleans(), label="truncate"):
        blob = blob[:data.draw(st.integers(0, len(blob) - 1), label="cut at")]
    else:
        for _ in range(data.draw(st.integers(1, 8), label="flips")):
            spot = data.draw(st.integers(0, len(blob) - 1))
            blob[spot] ^= data.draw(st.integers(1, 255))
    for root in folder():
        path = root / "items.parquet"
        path.write_bytes(bytes(blob))
        _, error = read_until_error(path)
        if error is not None:
            assert "Parquet" in str(error)


def test_parquet_corruption_after_good_rows_names_the_row(parquet_bytes: bytes,
                                                          tmp_path: Path) -> None:
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    path = tmp_path / "items.parquet"
    path.write_bytes(parquet_bytes)
    meta = parquet.ParquetFile(path).metadata
    second = meta.row_group(1).column(0)
    start = second.dictionary_page_offset or second.data_page_offset
    blob = bytearray(parquet_bytes)
    blob[start:start + second.total_compressed_size] = b"\xff" * second.total_compressed_size
    path.write_bytes(bytes(blob))
    got, error = read_until_error(path)
    assert error is not None and "Parquet data is corrupt" in str(error)
    assert got == [{"n": i, "s": f"row {i}"} for i in range(len(got))]
    assert str(error).startswith(f"input {path}: row {len(got) + 1}: ")
    assert pyarrow is not None


@FUZZ
@given(names=st.sets(st.from_regex(r"\.?[a-z0-9_]{1,8}", fullmatch=True), min_size=1,
                     max_size=8), data=st.data())
def test_directory_files_that_vanish_mid_run_are_still_listed(names: set[str],
                                                              data: st.DataObject) -> None:
    for root in folder():
        for name in names:
            (root / name).write_text(name)
        visible = sorted(n for n in names if not n.startswith("."))
        items = read_items(root)
        first = next(items, None)
        gone = data.draw(st.sets(st.sampled_from(sorted(names))), label="deleted")
        for name in gone:
            (root / name).unlink()
        rest = list(items)
        assert ([first] if first is not None else []) + rest == [str(root / n) for n in visible]


def test_directory_that_vanishes_before_it_is_listed(tmp_path: Path) -> None:
    root = tmp_path / "inputs"
    root.mkdir()
    items = read_items(root)
    root.rmdir()
    with pytest.raises(InputError, match=rf"^input {root}: cannot list the directory"):
        next(items)


def test_jsonl_file_deleted_mid_run_is_read_to_the_end(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_bytes(b"".join(jsonl(list(range(500)))))
    items = read_items(path)
    head = [next(items) for _ in range(3)]
    path.unlink()
    assert head + list(items) == list(range(500))


def test_a_pipe_is_not_counted_away(tmp_path: Path) -> None:
    fifo = tmp_path / "items.jsonl"
    os.mkfifo(fifo)
    assert fio.count_items(fifo) is None  # counting would have read what the run needs


def test_a_file_with_no_newline_costs_bounded_memory(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "zeros.jsonl"
    with path.open("wb") as handle:
        handle.truncate(320 << 20)  # sparse: 320 MiB of NULs on no disk, and no newline
    tracemalloc.start()
    try:
        counted = fio.count_items(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert counted == 1
    assert peak < 16 << 20, f"counting held {peak >> 20} MiB"
    monkeypatch.setattr(fio, "MAX_LINE_BYTES", 1 << 20)
    _, error = read_until_error(path)
    assert str(error).startswith(f"input {path}:1: line longer than 1,048,576 bytes")


def test_a_bad_csv_row_over_several_lines_is_named_by_its_first(tmp_path: Path) -> None:
    path = tmp_path / "items.csv"
    path.write_bytes(b'a,b\n1,2\n\xff",",x\nmore",3\n4,5\n')  # found by a 2,000-example search
    got, error = read_until_error(path)
    assert got == [{"a": "1", "b": "2"}]
    assert error is not None and str(error).startswith(f"input {path}:3: not valid UTF-8")
