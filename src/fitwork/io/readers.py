"""The readers of one input file by format (JSON Lines, CSV, Parquet) and of a directory,
each given an opener; `fitwork.io.inputs.read_items` picks one and opens the file."""

from __future__ import annotations

import csv
import dataclasses
import inspect
import json
import math
import os
import re
from collections import deque
from collections.abc import Callable, Iterator
from io import TextIOWrapper
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any

from fitwork.errors import InputError
from fitwork.io.formats import one_line, os_reason
from fitwork.io.unreadable import Unreadable

if TYPE_CHECKING:
    from _csv import Reader as CsvReader

_READ_BATCH_ROWS = 1_024


Opener = Callable[[], IO[bytes]]
"""Opens one input file for binary reading (a local file, or a URL through fsspec)."""


@dataclasses.dataclass
class Reading:
    """How one `read_items` call reads, and where its readers are: the file being read
    (its number among the input's files, its name) and where the last item yielded from
    it ends (see `InputReader.end_of`)."""

    tolerant: bool = False
    file: int = 0
    name: str = ""
    at: int = 0
    ends: deque[tuple[int, int, int]] | None = None
    """Where items end, from item ``start`` on, while a journal tracks them."""
    start: int = 0
    count: int = 0

    def note(self) -> None:
        """Keep where the item about to be yielded ends (only while ``ends`` is set)."""
        if self.count >= self.start and self.ends is not None:
            self.ends.append((self.count, self.file, self.at))
        self.count += 1

    def unreadable(self, error: str, **where: Any) -> Unreadable:
        """What stands for a bad line or row of the file being read."""
        return Unreadable(error=error, file=self.name, **where)


class InputReader:
    """The iterator `read_items` returns: the items, and, once `track` is called, where
    each one ends in the input (for a journal to identify what a run has read).

    ``files`` lists the input's files in reading order where positions say how much of
    them was read: byte offsets in JSON Lines, line numbers in CSV (read as text, so a
    byte count would cost a pass of its own); it is None where they do not (Parquet, a
    directory's file names), and a journal then identifies the input whole.
    """

    path: str | None = None
    """The input as `read_items` was given it (what a journal identifies the input by)."""

    def __init__(self, items: Iterator[Any], reading: Reading, files: list[str] | None
                 ) -> None:
        self._items = items
        self._reading = reading
        self.files = files

    def __iter__(self) -> Iterator[Any]:
        return self._items  # a loop runs the reader's own generator, at full speed

    def __next__(self) -> Any:
        return next(self._items)

    def track(self, start: int = 0) -> None:
        """Keep where each item from index ``start`` on ends, until `end_of` forgets it;
        call it before reading the first item."""
        if self._reading.ends is not None:
            return
        if self.files is None:
            raise ValueError("this input's positions are not offsets in its files")
        if inspect.getgeneratorstate(self._items) != inspect.GEN_CREATED:  # type: ignore[arg-type]
            raise ValueError("track() after reading began: call it before the first item")
        self._reading.ends, self._reading.start = deque(), start

    def has_read(self, index: int) -> bool:
        """Whether item ``index`` has been read while tracking (so `end_of` can answer)."""
        ends = self._reading.ends
        return bool(ends) and ends is not None and ends[-1][0] >= index

    def end_of(self, index: int) -> tuple[int, int] | None:
        """Where item ``index`` (0-based, in reading order) ends: the number of its file in
        `files` and the byte offset after its line (the number of its last line, in CSV).
        Forgets the ends of earlier items, so ask in increasing order; None if that item
        was not read while tracking."""
        ends = self._reading.ends
        if ends is None:
            return None
        while len(ends) > 1 and ends[1][0] <= index:
            ends.popleft()
        if ends and ends[0][0] == index:
            return ends[0][1], ends[0][2]
        return None


def read_error(place: str, exc: OSError) -> InputError:
    """An InputError for an OS error hit part way through reading a file."""
    return InputError(f"{place}: read failed ({os_reason(exc)}); check the file and the disk")


def read_jsonl(opener: Opener, place: str, reading: Reading, limit: int) -> Iterator[Any]:
    """Each non-blank line's JSON value, lines up to ``limit`` bytes; the error for a bad line
    names its 1-based number (a tolerant reader yields it as an `Unreadable` with its byte
    offset too)."""
    with opener() as handle:
        number = at = 0
        while True:
            try:
                raw = handle.readline(limit + 1)
            except OSError as exc:
                raise read_error(place, exc) from exc
            if not raw:
                return
            number += 1
            start, at = at, at + len(raw)
            try:
                if len(raw) > limit:
                    if reading.tolerant:  # the rest of the line goes with it
                        at += _skip_line(handle, limit, place)
                    raise InputError(
                        f"{place}:{number}: line longer than {limit:,} bytes; split the item, "
                        "or check that the file is JSON Lines (one value per line)"
                    )
                if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(
                        f"{place}:{number}: not valid UTF-8 (byte {exc.start + 1}); "
                        "save the file as UTF-8 or fix that line"
                    ) from exc
                if not text.strip():
                    continue
                value = _json_line(text, place, number)
            except InputError as exc:
                if not reading.tolerant:
                    raise
                reading.at = at
                if reading.ends is not None:
                    reading.note()
                yield reading.unreadable(str(exc), line=number, byte=start,
                                         text=raw[:1000].decode("utf-8", "replace"))
                continue
            reading.at = at
            if reading.ends is not None:
                reading.note()
            yield value


def _skip_line(handle: IO[bytes], limit: int, place: str) -> int:
    """Read past the rest of an over-long line; how many bytes that was."""
    skipped = 0
    while True:
        try:
            raw = handle.readline(limit + 1)
        except OSError as exc:
            raise read_error(place, exc) from exc
        skipped += len(raw)
        if not raw or raw.endswith(b"\n"):
            return skipped


def _json_line(text: str, place: str, number: int) -> Any:
    """One line's JSON value, or an InputError naming the line and what is wrong with it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        reason = one_line(exc.msg).removesuffix(" at")  # "Invalid control character at"
        raise InputError(
            f"{place}:{number}: invalid JSON ({reason} at column {exc.colno}); "
            "fix or remove that line"
        ) from exc
    except RecursionError:
        raise InputError(
            f"{place}:{number}: JSON nested too deeply to read; flatten that item"
        ) from None
    except ValueError as exc:  # e.g. an integer past Python's digit limit
        raise InputError(
            f"{place}:{number}: unreadable JSON value ({one_line(exc)}); fix that line"
        ) from exc


class LineStarts:
    """Where lines of a file start, found by counting newlines forward from the last line
    asked about (ask in increasing order); opened on the first question, so a reader that
    never needs one costs nothing."""

    def __init__(self, opener: Opener) -> None:
        self.opener = opener
        self.handle: IO[bytes] | None = None
        self.line, self.at = 1, 0

    def start_of(self, line: int) -> int | None:
        """The byte offset line ``line`` (1-based) starts at; None if it cannot be read."""
        try:
            if self.handle is None:
                self.handle = self.opener()
            while self.line < line:
                raw = self.handle.readline()
                if not raw:
                    return None
                self.line, self.at = self.line + 1, self.at + len(raw)
        except (OSError, InputError):
            return None
        return self.at

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def read_csv(opener: Opener, place: str, csv_types: bool, reading: Reading
              ) -> Iterator[dict[str, Any] | Unreadable]:
    """Each CSV row as a dict keyed by the header row; values stay strings unless
    ``csv_types`` turns numbers into numbers.

    Bytes that are not UTF-8 are carried through as surrogates and reported on the row that
    holds them, so every row before it is still yielded.  A tolerant reader yields a bad
    row as an `Unreadable` (its line and the byte offset the line starts at) and reads on;
    a bad header still raises.  Positions are line numbers (``reading.at`` is the last
    line of the row yielded): a CSV file is read as text, which keeps it fast.
    """
    starts = LineStarts(opener) if reading.tolerant else None
    with TextIOWrapper(opener(), encoding="utf-8-sig", errors="surrogateescape",
                       newline="") as handle:
        reader = csv.reader(handle)
        header = _csv_header(reader, place)
        try:
            yield from _csv_rows(reader, header, place, csv_types, reading, starts)
        except OSError as exc:
            raise read_error(place, exc) from exc
        finally:
            if starts is not None:
                starts.close()


def _csv_header(reader: CsvReader, place: str) -> list[str]:
    """The header row of a CSV reader, checked; an InputError for none or a bad one."""
    try:
        header = next(reader, None)
        if header is None:
            raise InputError(
                f"{place}: empty CSV, no header row; put the column names on the first line"
            )
        _check_utf8(header, place, reader.line_num)
        _check_header(header, place)
    except csv.Error as exc:
        raise InputError(
            f"{place}:{reader.line_num}: malformed CSV ({one_line(exc)}); fix that row"
        ) from exc
    except OSError as exc:
        raise read_error(place, exc) from exc
    return header


def _csv_rows(reader: CsvReader, header: list[str], place: str, csv_types: bool,
              reading: Reading, starts: LineStarts | None) -> Iterator[dict[str, Any] | Unreadable]:
    """The rows of a CSV reader past its header, as `read_csv` yields them."""
    width = len(header)
    while True:
        start = reader.line_num + 1  # a quoted field may carry a row over lines
        try:
            row = next(reader, None)
            if row is None:
                return
            if not row:
                continue
            _check_utf8(row, place, start)
            if len(row) != width:
                raise InputError(
                    f"{place}:{start}: row has {len(row)} fields but the header has "
                    f"{width}; make every row match the header (quote fields that "
                    "hold commas)"
                )
        except csv.Error as exc:
            error = InputError(f"{place}:{reader.line_num}: malformed CSV "
                               f"({one_line(exc)}); fix that row")
            if starts is None:
                raise error from exc
            reading.at = reader.line_num
            if reading.ends is not None:
                reading.note()
            yield reading.unreadable(str(error), line=reader.line_num,
                                     byte=starts.start_of(reader.line_num))
            continue
        except InputError as exc:
            if starts is None:
                raise
            reading.at = reader.line_num
            if reading.ends is not None:
                reading.note()
            text = ",".join(row or ()).encode("utf-8", "surrogateescape")
            yield reading.unreadable(str(exc), line=start, byte=starts.start_of(start),
                                     text=text[:1000].decode("utf-8", "replace"))
            continue
        reading.at = reader.line_num
        if reading.ends is not None:
            reading.note()
        if csv_types:
            yield {name: csv_value(value)
                   for name, value in zip(header, row, strict=True)}
        else:
            yield dict(zip(header, row, strict=True))


_CSV_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_CSV_FLOAT = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def csv_value(text: str) -> str | int | float:
    """A CSV field as the number it spells, or the text itself.

    ``"42"`` and ``"-7"`` give ints; ``"2.5"``, ``"-0.5"``, ``"1e+16"`` give floats (every
    int and finite float Python writes comes back equal). Text stays text, and so does what
    only Python's parsers would call a number: ``""``, ``"nan"``, ``"inf"``, a leading ``+``
    or spaces, ``"1_000"``, a number too large to be finite, and leading zeros (``"007"``,
    an identifier, not seven).
    """
    if _CSV_INT.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # past Python's limit on digits in an int
            return text
    if _CSV_FLOAT.fullmatch(text):
        number = float(text)
        if math.isfinite(number):
            return number
    return text


def _check_utf8(row: list[str], place: str, line: int) -> None:
    """Refuse a row holding bytes that were not UTF-8 (decoded as lone surrogates)."""
    try:
        "".join(row).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(
            f"{place}:{line}: not valid UTF-8; save the file as UTF-8 or fix that line"
        ) from None


def _check_header(header: list[str], place: str) -> None:
    """Reject a header row with no names or with a name used twice."""
    if not any(name.strip() for name in header):
        raise InputError(
            f"{place}:1: header row has no column names; put the column names on the first line"
        )
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise InputError(
                f"{place}:1: column {name!r} appears twice in the header; give each column a "
                "unique name"
            )
        seen.add(name)


def read_directory(path: Path, place: str) -> Iterator[str]:
    """The path of each regular, non-hidden file directly inside a directory, sorted by name."""
    try:
        with os.scandir(path) as entries:
            names = sorted(
                entry.name
                for entry in entries
                if not entry.name.startswith(".") and entry.is_file()
            )
    except PermissionError as exc:
        raise InputError(
            f"{place}: permission denied listing the directory; make it readable or point "
            "--input elsewhere"
        ) from exc
    except OSError as exc:
        raise InputError(
            f"{place}: cannot list the directory ({os_reason(exc)}); check the --input path"
        ) from exc
    for name in names:
        yield str(path / name)


def read_parquet(
    opener: Opener, place: str, pyarrow: ModuleType, parquet: ModuleType, reading: Reading
) -> Iterator[dict[str, Any] | Unreadable]:
    """Each Parquet row as a dict, read a record batch at a time, a row group after
    another; a tolerant reader yields a row group that fails (from the batch that failed
    on) as one `Unreadable` and reads the next."""
    errors = (pyarrow.ArrowException, OSError, ValueError, MemoryError)
    with opener() as handle:
        try:
            reader = parquet.ParquetFile(handle)
        except errors as exc:
            raise InputError(
                f"{place}: not a readable Parquet file ({one_line(exc)}); check the file, or "
                "rename it if it is not Parquet"
            ) from exc
        rows = 0
        for group in range(reader.num_row_groups):
            size = reader.metadata.row_group(group).num_rows
            batches = reader.iter_batches(batch_size=_READ_BATCH_ROWS, row_groups=[group])
            read = 0
            while True:
                try:
                    batch = next(batches, None)
                    values = [] if batch is None else batch.to_pylist()
                except errors as exc:
                    error = InputError(
                        f"{place}: row {rows + read + 1}: Parquet data is corrupt in row group "
                        f"{group} ({one_line(exc)}); rewrite the file"
                    )
                    if not reading.tolerant:
                        raise error from exc
                    yield reading.unreadable(str(error), row_group=group,
                                             rows=(rows + read + 1, rows + size))
                    break
                if batch is None:
                    break
                read += len(values)
                yield from values
            rows += size


def count_lines(handle: IO[bytes]) -> int:
    """Non-blank lines in a binary file, read a block at a time so one huge line (or a file
    with no newline at all) costs a block of memory, not the line."""
    count, content, first = 0, False, True
    while block := handle.read(1 << 20):
        if first:
            block, first = block.removeprefix(b"\xef\xbb\xbf"), False
        parts = block.split(b"\n")
        for part in parts[:-1]:
            count += content or bool(part.strip())
            content = False
        content = content or bool(parts[-1].strip())
    return count + content
