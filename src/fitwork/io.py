"""Read run inputs (JSON Lines, CSV, a directory, Parquet; globs, URLs) and write outputs."""

from __future__ import annotations

import base64
import csv
import dataclasses
import datetime
import functools
import hashlib
import inspect
import json
import math
import os
import re
import shutil
import stat
from collections import deque
from collections.abc import Callable, Iterator
from io import TextIOWrapper
from pathlib import Path, PurePath
from types import ModuleType, TracebackType
from typing import IO, Any, Literal

import numpy as np

from fitwork.errors import InputError
from fitwork.fs import expand, is_glob, is_url, open_input
from fitwork.unreadable import Unreadable

__all__ = ["BAD_INPUT", "InputReader", "OutputWriter", "Unreadable", "count_items",
           "open_writer", "read_items"]

BadInput = Literal["error", "dead-letter"]
BAD_INPUT: tuple[str, ...] = ("error", "dead-letter")
"""What a reader does with a line or row it cannot read: stop the run with the one-line
error, or yield an `Unreadable` in its place (which the run dead-letters) and go on."""

PARQUET_EXTRA = "install the parquet extra: pip install 'fitwork[parquet]'"
PARQUET_BATCH_ROWS = 10_000
FLUSH_EVERY = 100
_READ_BATCH_ROWS = 1_024
MAX_LINE_BYTES = 256 << 20
"""The longest JSON Lines line read; a longer one (or a binary file) is an error, not a hog."""
_WHITESPACE = re.compile(r"\s+")


def _one_line(text: object) -> str:
    """Any message squeezed onto one printable line, so an error stays a single line and
    no control character from a file reaches the terminal."""
    squeezed = _WHITESPACE.sub(" ", str(text)).strip()
    return "".join(ch if ch.isprintable() else "?" for ch in squeezed)


def _os_reason(exc: OSError) -> str:
    """The readable part of an OS error ("permission denied"), without the path."""
    reason = exc.strerror or type(exc).__name__
    return _one_line(reason).lower()


def _import_pyarrow(place: str) -> tuple[ModuleType, ModuleType]:
    """`pyarrow` and `pyarrow.parquet`, or an InputError naming the place and the extra."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise InputError(
            f"{place}: Parquet needs pyarrow, which is missing; {PARQUET_EXTRA}"
        ) from exc
    return pyarrow, pyarrow.parquet


PYARROW_SAFE_SINCE = (14, 0, 1)
"""pyarrow before this unpickles extension types found in a Parquet file (CVE-2023-47248)."""


def pyarrow_reads_safely(version: str) -> bool:
    """Whether this pyarrow release reads Parquet without unpickling anything in the file."""
    parts = []
    for piece in version.split(".")[:3]:
        digits = re.match(r"\d*", piece)
        parts.append(int(digits.group() or 0) if digits else 0)
    return tuple(parts) >= PYARROW_SAFE_SINCE


def _format(path: Path) -> str:
    """Which reader or writer a file path gets, from its suffix: "csv", "parquet" or "jsonl"."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix == ".parquet":
        return "parquet"
    return "jsonl"


# --------------------------------------------------------------------------- reading


def _stat_input(path: Path, place: str) -> os.stat_result:
    """The input's stat, or an InputError that says why it cannot be used."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise InputError(f"{place}: no such file or directory; check the --input path") from exc
    except PermissionError as exc:
        raise InputError(
            f"{place}: permission denied; make it readable (chmod) or point --input elsewhere"
        ) from exc
    except OSError as exc:
        raise InputError(
            f"{place}: cannot access ({_os_reason(exc)}); check the --input path"
        ) from exc


Opener = Callable[[], IO[bytes]]
"""Opens one input file for binary reading (a local file, or a URL through fsspec)."""


@dataclasses.dataclass
class _Reading:
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

    def __init__(self, items: Iterator[Any], reading: _Reading, files: list[str] | None
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


def _check_bad_input(bad_input: str) -> bool:
    """Whether ``bad_input`` asks for tolerant reading; an InputError for an unknown mode."""
    if bad_input not in BAD_INPUT:
        raise InputError(f"bad_input={bad_input!r}: must be one of {', '.join(BAD_INPUT)}")
    return bad_input == "dead-letter"


def read_items(path: str | Path, csv_types: bool = False,
               bad_input: BadInput | str = "error") -> InputReader:
    """Stream the items of a run input, one at a time.

    JSON Lines (any file that is not ``.csv``/``.parquet``) yields each non-blank line's value;
    CSV yields each row as a dict of strings, or with ``csv_types`` a dict whose numbers are
    numbers (see `csv_value`); a directory yields the path of each visible regular file in it,
    sorted; Parquet yields each row as a dict. A glob (``data/*.jsonl``, ``data/**/*.parquet``)
    yields the items of every file it matches, in sorted order, each read by its suffix; a
    URL (``s3://bucket/x.parquet``, ``s3://bucket/x/*.jsonl``) is read through fsspec (the
    ``fsspec`` extra), and must be passed as a string. The path is checked now; bad content
    raises `InputError` when iteration reaches it, after the items before it were yielded.

    ``bad_input="dead-letter"`` reads on past what cannot be read: a bad JSON Lines line
    (invalid JSON or UTF-8, too long), a CSV row (wrong field count, bytes not UTF-8,
    malformed) or a Parquet row group that fails to read is yielded as an `Unreadable`
    naming the file and the line and byte offset (or the row group), and `fitwork.run`
    dead-letters it as a failed item.  A file that cannot be opened at all, or a CSV
    header, still raises.
    """
    tolerant = _check_bad_input(bad_input)
    reading = _Reading(tolerant)
    text = os.fspath(path)
    if is_url(text) or (is_glob(text) and not os.path.lexists(text)):
        matches = _matches(text)
        offsets = all(_format(Path(m)) != "parquet" for m in matches)
        return InputReader(_read_each(matches, csv_types, reading), reading,
                           matches if offsets else None)
    path = Path(path)
    place = f"input {path}"
    info = _stat_input(path, place)
    if stat.S_ISDIR(info.st_mode):
        return InputReader(_read_directory(path, place), reading, None)
    reading.name = str(path)
    items = _read_file(path, place, functools.partial(_open_input, path, place), csv_types,
                       reading)
    return InputReader(items, reading, None if _format(path) == "parquet" else [str(path)])


def _read_file(name: str | Path, place: str, opener: Opener, csv_types: bool,
               reading: _Reading) -> Iterator[Any]:
    """The items of one file, by the suffix of its name."""
    fmt = _format(Path(name))
    if fmt == "csv":
        return _read_csv(opener, place, csv_types, reading)
    if fmt == "parquet":
        pyarrow, parquet = _import_pyarrow(place)
        if not pyarrow_reads_safely(pyarrow.__version__):
            raise InputError(
                f"{place}: pyarrow {pyarrow.__version__} can run code hidden in a Parquet file "
                "(CVE-2023-47248); upgrade it: pip install 'pyarrow>=14.0.1'"
            )
        return _read_parquet(opener, place, pyarrow, parquet, reading)
    return _read_jsonl(opener, place, reading)


def _matches(pattern: str) -> list[str]:
    """The files a glob or URL names; nothing there is an InputError now."""
    matches = expand(pattern, files_only=True)
    if not matches:
        if is_glob(pattern):
            raise InputError(f"input {pattern}: no file matches the pattern; check the --input "
                             "pattern")
        raise InputError(f"input {pattern}: no such file; check the --input URL")
    return matches


def _read_each(matches: list[str], csv_types: bool, reading: _Reading) -> Iterator[Any]:
    for number, match in enumerate(matches):
        place = f"input {match}"
        if is_url(match):
            opener = functools.partial(open_input, match, "rb", place)
        else:
            path = Path(match)
            if stat.S_ISDIR(_stat_input(path, place).st_mode):
                raise InputError(f"{place}: is a directory, expected a file; check the "
                                 "--input pattern")
            opener = functools.partial(_open_input, path, place)
        reading.file, reading.name, reading.at = number, match, 0
        yield from _read_file(match, place, opener, csv_types, reading)


def _open_input(path: Path, place: str, **kwargs: Any) -> IO[Any]:
    """Open an input file, turning OS errors into one-line InputErrors."""
    mode = kwargs.pop("mode", "rb")
    try:
        return open(path, mode, **kwargs)
    except FileNotFoundError as exc:
        raise InputError(f"{place}: no such file or directory; check the --input path") from exc
    except PermissionError as exc:
        raise InputError(
            f"{place}: permission denied; make it readable (chmod) or point --input elsewhere"
        ) from exc
    except IsADirectoryError as exc:
        raise InputError(
            f"{place}: is a directory, expected a file; check the --input path"
        ) from exc
    except OSError as exc:
        raise InputError(
            f"{place}: cannot open ({_os_reason(exc)}); check the --input path"
        ) from exc


def _read_error(place: str, exc: OSError) -> InputError:
    """An InputError for an OS error hit part way through reading a file."""
    return InputError(f"{place}: read failed ({_os_reason(exc)}); check the file and the disk")


def _read_jsonl(opener: Opener, place: str, reading: _Reading) -> Iterator[Any]:
    """Each non-blank line's JSON value; the error for a bad line names its 1-based number
    (a tolerant reader yields it as an `Unreadable` with its byte offset too)."""
    limit = MAX_LINE_BYTES
    with opener() as handle:
        number = at = 0
        while True:
            try:
                raw = handle.readline(limit + 1)
            except OSError as exc:
                raise _read_error(place, exc) from exc
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
            raise _read_error(place, exc) from exc
        skipped += len(raw)
        if not raw or raw.endswith(b"\n"):
            return skipped


def _json_line(text: str, place: str, number: int) -> Any:
    """One line's JSON value, or an InputError naming the line and what is wrong with it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        reason = _one_line(exc.msg).removesuffix(" at")  # "Invalid control character at"
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
            f"{place}:{number}: unreadable JSON value ({_one_line(exc)}); fix that line"
        ) from exc


class _LineStarts:
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


def _read_csv(opener: Opener, place: str, csv_types: bool, reading: _Reading
              ) -> Iterator[dict[str, Any]]:
    """Each CSV row as a dict keyed by the header row; values stay strings unless
    ``csv_types`` turns numbers into numbers.

    Bytes that are not UTF-8 are carried through as surrogates and reported on the row that
    holds them, so every row before it is still yielded.  A tolerant reader yields a bad
    row as an `Unreadable` (its line and the byte offset the line starts at) and reads on;
    a bad header still raises.  Positions are line numbers (``reading.at`` is the last
    line of the row yielded): a CSV file is read as text, which keeps it fast.
    """
    starts = _LineStarts(opener) if reading.tolerant else None
    with TextIOWrapper(opener(), encoding="utf-8-sig", errors="surrogateescape",
                       newline="") as handle:
        reader = csv.reader(handle)
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
                f"{place}:{reader.line_num}: malformed CSV ({_one_line(exc)}); fix that row"
            ) from exc
        except OSError as exc:
            raise _read_error(place, exc) from exc
        width = len(header)
        try:
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
                                       f"({_one_line(exc)}); fix that row")
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
                    text = ",".join(row).encode("utf-8", "surrogateescape")
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
        except OSError as exc:
            raise _read_error(place, exc) from exc
        finally:
            if starts is not None:
                starts.close()


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


def _read_directory(path: Path, place: str) -> Iterator[str]:
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
            f"{place}: cannot list the directory ({_os_reason(exc)}); check the --input path"
        ) from exc
    for name in names:
        yield str(path / name)


def _read_parquet(
    opener: Opener, place: str, pyarrow: ModuleType, parquet: ModuleType, reading: _Reading
) -> Iterator[dict[str, Any]]:
    """Each Parquet row as a dict, read a record batch at a time, a row group after
    another; a tolerant reader yields a row group that fails (from the batch that failed
    on) as one `Unreadable` and reads the next."""
    errors = (pyarrow.ArrowException, OSError, ValueError, MemoryError)
    with opener() as handle:
        try:
            reader = parquet.ParquetFile(handle)
        except errors as exc:
            raise InputError(
                f"{place}: not a readable Parquet file ({_one_line(exc)}); check the file, or "
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
                        f"{group} ({_one_line(exc)}); rewrite the file"
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


def count_items(path: str | Path) -> int | None:
    """How many items `read_items` will yield, where that is cheap to know; `None` if unknown.

    Never raises for a bad input: `read_items` reports that, with the place and the fix.
    A glob counts each file it matches; a URL is not counted (that would read it twice).
    """
    text = os.fspath(path)
    if is_url(text):
        return None
    path = Path(path)
    try:
        if is_glob(text) and not os.path.lexists(text):
            counts = [count_items(match) for match in expand(text, files_only=True)]
            known = [count for count in counts if count is not None]
            return sum(known) if known and len(known) == len(counts) else None
        info = path.stat()
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            return None  # a pipe or device: counting would consume what the run reads
        if stat.S_ISDIR(info.st_mode):
            with os.scandir(path) as entries:
                return sum(
                    1 for entry in entries if not entry.name.startswith(".") and entry.is_file()
                )
        fmt = _format(path)
        if fmt == "parquet":
            try:
                import pyarrow.parquet
            except ImportError:
                return None
            return int(pyarrow.parquet.ParquetFile(path).metadata.num_rows)
        if fmt == "csv":
            with open(path, encoding="utf-8-sig", newline="") as handle:
                rows = sum(1 for row in csv.reader(handle) if row)
            return max(rows - 1, 0)
        with open(path, "rb") as handle:
            return _count_lines(handle)
    except Exception:
        return None


def _count_lines(handle: IO[bytes]) -> int:
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


# --------------------------------------------------------------------------- writing


class OutputWriter:
    """Where a run's outputs go; use `open_writer` to get one, and as a context manager."""

    path: Path
    count: int

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.count = 0
        self.closed = False
        self._place = f"output {self.path}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(
                f"{self._place}: cannot create the parent directory ({_os_reason(exc)}); "
                "check the --output path"
            ) from exc

    def _open_output(self) -> IO[Any]:
        """Open the output file for writing, turning OS errors into one-line InputErrors."""
        try:
            return open(self.path, "wb")
        except IsADirectoryError as exc:
            raise InputError(
                f"{self._place}: is a directory; give --output a file path"
            ) from exc
        except OSError as exc:
            raise InputError(
                f"{self._place}: cannot open for writing ({_os_reason(exc)}); "
                "check the --output path"
            ) from exc

    def _check_open(self) -> None:
        """Refuse a write after `close`, as a closed file does."""
        if self.closed:
            raise ValueError(f"{self._place}: write after close")

    def write(self, item: Any) -> None:
        """Write one output item."""
        raise NotImplementedError

    def close(self) -> None:
        """Write whatever is buffered and close the file; closing twice is harmless."""
        raise NotImplementedError

    def sync(self) -> int:
        """Make every output written so far durable; the position a journal records."""
        raise NotImplementedError

    def cleanup(self) -> None:
        """Remove what only a resumed run would need (the run finished and its journal is
        gone); nothing for most formats."""

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class JsonLinesWriter(OutputWriter):
    """One JSON value per line, flushed every `FLUSH_EVERY` lines so partial output survives."""

    def __init__(self, path: str | Path, resume_at: tuple[int, int] | None = None) -> None:
        super().__init__(path)
        if resume_at is None:
            self._handle = self._open_output()
        else:  # a resumed run: keep the first bytes (and outputs) a journal recorded
            size, self.count = resume_at
            try:
                self._handle = open(self.path, "r+b")  # noqa: SIM115 (closed by close())
                self._handle.truncate(size)
                self._handle.seek(size)
            except OSError as exc:
                raise InputError(f"{self._place}: cannot reopen to resume "
                                 f"({_os_reason(exc)}); run again without --resume") from exc
        self._unflushed = 0

    def _default(self, value: Any) -> Any:
        """Encode what `json` cannot by itself, or raise an InputError naming the type."""
        try:
            return json_default(value)
        except TypeError as exc:
            raise self._unencodable(str(exc)) from None

    def _unencodable(self, what: str) -> InputError:
        """The error for an output item that JSON cannot hold."""
        return InputError(
            f"{self._place}: item {self.count + 1}: cannot encode {what} as JSON; return "
            "JSON-serialisable values (dict, list, str, int, float, bool, None) or write "
            "Parquet (--output PATH.parquet)"
        )

    def write(self, item: Any) -> None:
        """Encode one item and write it as one line."""
        self._check_open()
        try:
            line = json.dumps(item, default=self._default, ensure_ascii=False)
        except InputError:
            raise
        except (TypeError, ValueError) as exc:
            raise self._unencodable(f"it ({_one_line(exc)})") from exc
        self._handle.write(line.encode("utf-8") + b"\n")
        self.count += 1
        self._unflushed += 1
        if self._unflushed >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Push written lines to the operating system now."""
        self._handle.flush()
        self._unflushed = 0

    def sync(self) -> int:
        """Make every line written so far durable; the file's size in bytes."""
        self.flush()
        os.fsync(self._handle.fileno())
        return self._handle.tell()

    def close(self) -> None:
        """Flush and close the file."""
        if self.closed:
            return
        self.closed = True
        try:
            self._handle.flush()
        finally:
            self._handle.close()


class ParquetOutputWriter(OutputWriter):
    """Rows buffered and written as record batches of up to `PARQUET_BATCH_ROWS` rows."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._pyarrow, self._parquet = _import_pyarrow(self._place)
        self._handle = self._open_output()
        self._rows: list[dict[str, Any]] = []
        self._writer: Any = None
        self._schema: Any = None
        self._written = 0

    def write(self, item: Any) -> None:
        """Buffer one row (a non-dict item becomes ``{"value": item}``); write a full batch."""
        self._check_open()
        row = item if isinstance(item, dict) else {"value": item}
        self._rows.append(row)
        self.count += 1
        if len(self._rows) >= PARQUET_BATCH_ROWS:
            self._write_batch()

    def _write_batch(self) -> None:
        """Turn the buffered rows into one record batch and write it."""
        rows, self._rows = self._rows, []
        if not rows:
            return
        first, last = self._written + 1, self._written + len(rows)
        span = f"rows {first}-{last}"
        batch = self._batch(rows, span)
        if self._writer is None:
            self._schema = batch.schema
            self._writer = self._parquet.ParquetWriter(self._handle, self._schema)
        try:
            self._writer.write_batch(batch)
        except (self._pyarrow.ArrowException, OSError) as exc:
            raise InputError(
                f"{self._place}: {span}: write failed ({_one_line(exc)}); check the disk"
            ) from exc
        self._written = last

    def _batch(self, rows: list[dict[str, Any]], span: str) -> Any:
        """The rows as one record batch of the output's schema (the first batch sets it)."""
        pyarrow = self._pyarrow
        try:
            if self._schema is None:
                return pyarrow.RecordBatch.from_pylist(rows)
            self._check_columns(rows, span)
            return pyarrow.RecordBatch.from_pylist(rows, schema=self._schema)
        except InputError:
            raise
        except (pyarrow.ArrowException, TypeError, ValueError) as exc:
            raise InputError(
                f"{self._place}: {span}: cannot convert to Parquet ({_one_line(exc)}); give "
                "every item the same fields with one type each, or write JSON Lines"
            ) from exc

    def _check_columns(self, rows: list[dict[str, Any]], span: str) -> None:
        """Refuse fields the first batch did not have, rather than drop them silently."""
        known = set(self._schema.names)
        for row in rows:
            extra = [key for key in row if key not in known]
            if extra:
                raise InputError(
                    f"{self._place}: {span}: field {extra[0]!r} was not in the first "
                    f"{PARQUET_BATCH_ROWS} rows, so the Parquet schema lacks it; give every "
                    "item the same fields or write JSON Lines"
                )

    def close(self) -> None:
        """Write the last batch, finish the Parquet footer and close the file."""
        if self.closed:
            return
        self.closed = True
        try:
            self._write_batch()
        finally:
            try:
                if self._writer is None:
                    empty = self._pyarrow.schema([])
                    self._writer = self._parquet.ParquetWriter(self._handle, empty)
                self._writer.close()
            finally:
                self._handle.close()


class PartedParquetWriter(ParquetOutputWriter):
    """A Parquet output a journal can resume: rows are committed as part files beside it
    (``OUTPUT.parts/part-000000.parquet``, ...), each written aside, synced and renamed, and
    `close` joins them into the output.

    A Parquet file is readable only once its footer is written, so it cannot be cut back to
    what a journal saw durable, as a JSON Lines file is.  Parts can: `sync` commits the rows
    buffered so far as one more part and returns how many parts there are, and a resumed
    run keeps that many and deletes any later one (written after the last checkpoint, by
    items the resumed run feeds again).  `close` writes the output aside and renames it
    over ``OUTPUT``, keeping the parts; `cleanup` removes them once the journal is gone.
    """

    def __init__(self, path: str | Path, resume_at: tuple[int, int] | None = None) -> None:
        OutputWriter.__init__(self, path)
        self._pyarrow, self._parquet = _import_pyarrow(self._place)
        self.parts_dir = self.path.with_name(self.path.name + ".parts")
        self._rows = []
        self._writer = None
        self._schema = None
        self._written = 0
        self.parts = 0
        if resume_at is None:
            shutil.rmtree(self.parts_dir, ignore_errors=True)
        else:
            self.parts, self.count = resume_at
            self._written = self.count
            self._keep_parts(self.parts)
        try:
            self.parts_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"{self._place}: cannot create {self.parts_dir.name} "
                             f"({_os_reason(exc)}); check the --output path") from exc

    def _part(self, index: int) -> Path:
        return self.parts_dir / f"part-{index:06d}.parquet"

    def _keep_parts(self, count: int) -> None:
        """Keep the first ``count`` parts of an interrupted run (their schema is the
        output's); delete later ones and anything half written."""
        for index in range(count):
            if not self._part(index).is_file():
                raise InputError(
                    f"{self._place}: part {self._part(index).name} of the interrupted run is "
                    f"missing; delete the journal and {self.parts_dir.name} and run again "
                    "without --resume")
        if self.parts_dir.is_dir():
            for entry in self.parts_dir.iterdir():
                index = _part_index(entry.name)
                if index is None or index >= count:
                    entry.unlink(missing_ok=True)
        if count:
            try:
                self._schema = self._parquet.read_schema(self._part(0))
            except (self._pyarrow.ArrowException, OSError) as exc:
                raise InputError(
                    f"{self._place}: part {self._part(0).name} is unreadable "
                    f"({_one_line(exc)}); delete the journal and run again without --resume"
                ) from exc

    def _write_batch(self) -> None:
        """Commit the buffered rows as the next part: written aside, synced, renamed."""
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        first, last = self._written + 1, self._written + len(rows)
        batch = self._batch(rows, f"rows {first}-{last}")
        if self._schema is None:
            self._schema = batch.schema
        final = self._part(self.parts)
        aside = final.with_name(f".{final.name}.tmp")
        try:
            with open(aside, "wb") as handle:
                with self._parquet.ParquetWriter(handle, self._schema) as writer:
                    writer.write_batch(batch)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(aside, final)
        except (self._pyarrow.ArrowException, OSError) as exc:
            raise InputError(f"{self._place}: rows {first}-{last}: write failed "
                             f"({_one_line(exc)}); check the disk") from exc
        self.parts += 1
        self._written = last

    def sync(self) -> int:
        """Commit what is buffered as a part; how many parts are committed."""
        self._check_open()
        self._write_batch()
        sync_directory(self.parts_dir)
        return self.parts

    def close(self) -> None:
        """Commit the last rows and join every part into the output (written aside and
        renamed over it, so the output is whole or as it was)."""
        if self.closed:
            return
        self.closed = True
        self._write_batch()
        aside = self.path.with_name(f".{self.path.name}.tmp")
        try:
            with open(aside, "wb") as handle:
                schema = self._schema if self._schema is not None else self._pyarrow.schema([])
                with self._parquet.ParquetWriter(handle, schema) as writer:
                    for index in range(self.parts):
                        for batch in self._parquet.ParquetFile(self._part(index)).iter_batches(
                                batch_size=PARQUET_BATCH_ROWS):
                            writer.write_batch(batch)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(aside, self.path)
        except (self._pyarrow.ArrowException, OSError) as exc:
            raise InputError(f"{self._place}: joining {self.parts} parts failed "
                             f"({_one_line(exc)}); they stay in {self.parts_dir}") from exc

    def cleanup(self) -> None:
        """Remove the parts: the output holds them and no journal needs them."""
        shutil.rmtree(self.parts_dir, ignore_errors=True)


def _part_index(name: str) -> int | None:
    """The index of a committed part file's name, or None for anything else."""
    match = re.fullmatch(r"part-(\d{6})\.parquet", name)
    return int(match.group(1)) if match else None


def sync_directory(directory: Path) -> None:
    """Make new names and renames inside ``directory`` durable (where the platform allows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def json_default(value: Any) -> Any:
    """What an output JSON cannot hold by itself becomes: arrays and numpy scalars as lists
    and numbers, bytes as base64, paths as text, sets as sorted lists, dataclasses as dicts,
    dates and times in ISO 8601; anything else raises a TypeError naming its type."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, set | frozenset):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    raise TypeError(f"a value of type {_type_name(value)}")


def _type_name(value: object) -> str:
    """A value's type as ``module.Name`` (just ``Name`` for builtins)."""
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def open_writer(path: str | Path, resume_at: tuple[int, int] | None = None,
                journaled: bool = False) -> OutputWriter:
    """A writer for a run's outputs: Parquet for ``*.parquet``, JSON Lines for anything else.

    ``journaled`` makes the output resumable: `OutputWriter.sync` returns a position a
    journal records, and ``resume_at`` (position, outputs) keeps that much of an earlier
    run's output and writes after it.  The position is the byte size of a JSON Lines file,
    and the number of committed part files of a Parquet one (`PartedParquetWriter`).
    """
    if _format(Path(path)) == "parquet":
        if journaled or resume_at is not None:
            return PartedParquetWriter(path, resume_at)
        return ParquetOutputWriter(path)
    return JsonLinesWriter(path, resume_at)


class OutputDigest:
    """An order-independent digest of a run's outputs: equal digests, equal multisets.

    Each output is written as canonical JSON (sorted keys; what JSON cannot hold by its
    ``repr``) and hashed with BLAKE2b to 64 bits; the digest is the sum of the hashes modulo
    2**64, so it does not depend on the order outputs arrived in.
    """

    def __init__(self) -> None:
        self.total = 0
        self.count = 0

    def add(self, value: Any) -> None:
        """Count one output."""
        text = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
        self.total = (self.total + int.from_bytes(
            hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")) % (1 << 64)
        self.count += 1

    def hexdigest(self) -> str:
        """``<count>:<16 hex digits>``."""
        return f"{self.count}:{self.total:016x}"
