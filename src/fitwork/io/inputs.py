"""Read run inputs (JSON Lines, CSV, a directory, Parquet; globs, URLs).

Reading one input (a file, a directory, a glob, a URL) is decided and opened here; the
format readers are in `fitwork.io.readers`, the output writers in `fitwork.io.writers`.
"""

from __future__ import annotations

import csv
import functools
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal

from fitwork.errors import InputError
from fitwork.io.formats import (
    file_format,
    import_pyarrow,
    os_reason,
    pyarrow_reads_safely,
)
from fitwork.io.fs import expand, is_glob, is_url, open_input
from fitwork.io.readers import (
    InputReader,
    Opener,
    Reading,
    count_lines,
    read_csv,
    read_directory,
    read_jsonl,
    read_parquet,
)

BadInput = Literal["error", "dead-letter"]
BAD_INPUT: tuple[str, ...] = ("error", "dead-letter")
"""What a reader does with a line or row it cannot read: stop the run with the one-line
error, or yield an `Unreadable` in its place (which the run dead-letters) and go on."""

MAX_LINE_BYTES = 256 << 20
"""The longest JSON Lines line read; a longer one (or a binary file) is an error, not a hog."""


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
            f"{place}: cannot access ({os_reason(exc)}); check the --input path"
        ) from exc


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
    reader = _open_items(path, csv_types, _check_bad_input(bad_input))
    reader.path = os.fspath(path)
    return reader


def _open_items(path: str | Path, csv_types: bool, tolerant: bool) -> InputReader:
    """`read_items`'s reader of ``path``, the input checked now."""
    reading = Reading(tolerant)
    text = os.fspath(path)
    if is_url(text) or (is_glob(text) and not os.path.lexists(text)):
        matches = _matches(text)
        offsets = all(file_format(Path(m)) != "parquet" for m in matches)
        return InputReader(_read_each(matches, csv_types, reading), reading,
                           matches if offsets else None)
    path = Path(path)
    place = f"input {path}"
    info = _stat_input(path, place)
    if stat.S_ISDIR(info.st_mode):
        return InputReader(read_directory(path, place), reading, None)
    reading.name = str(path)
    items = _read_file(path, place, functools.partial(_open_input, path, place), csv_types,
                       reading)
    return InputReader(items, reading, None if file_format(path) == "parquet" else [str(path)])


def _read_file(name: str | Path, place: str, opener: Opener, csv_types: bool,
               reading: Reading) -> Iterator[Any]:
    """The items of one file, by the suffix of its name."""
    fmt = file_format(Path(name))
    if fmt == "csv":
        return read_csv(opener, place, csv_types, reading)
    if fmt == "parquet":
        pyarrow, parquet = import_pyarrow(place)
        if not pyarrow_reads_safely(pyarrow.__version__):
            raise InputError(
                f"{place}: pyarrow {pyarrow.__version__} can run code hidden in a Parquet file "
                "(CVE-2023-47248); upgrade it: pip install 'pyarrow>=14.0.1'"
            )
        return read_parquet(opener, place, pyarrow, parquet, reading)
    return read_jsonl(opener, place, reading, MAX_LINE_BYTES)


def _matches(pattern: str) -> list[str]:
    """The files a glob or URL names; nothing there is an InputError now."""
    matches = expand(pattern, files_only=True)
    if not matches:
        if is_glob(pattern):
            raise InputError(f"input {pattern}: no file matches the pattern; check the --input "
                             "pattern")
        raise InputError(f"input {pattern}: no such file; check the --input URL")
    return matches


def _read_each(matches: list[str], csv_types: bool, reading: Reading) -> Iterator[Any]:
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
            f"{place}: cannot open ({os_reason(exc)}); check the --input path"
        ) from exc


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
        fmt = file_format(path)
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
            return count_lines(handle)
    except Exception:
        return None

