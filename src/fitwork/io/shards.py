"""Sharded sources: the driver hands out shards, and a reader unit's replicas read their rows.

A `Source` is a sequence of small shard descriptors and a function that reads one into rows.
`fitwork.run` puts a reader unit (a flat-map named ``read``) in front of the pipeline, feeds
it the descriptors, and lets its replicas hand the rows straight to the first unit: the
driver moves a few hundred bytes per shard and never an item.  A shard is an item of the
run's books, so the run's exactly-once guarantee covers it: a reader killed mid-shard has
its shard read again, and its rows reach the output once.  A shard that cannot be read is
retried, then dead-lettered with the file and the byte offset or row of the fault.  A
shard whose reader (or a later unit holding its rows) died is not retried whole: the run
core retries it as `Slice`s, row ranges of it that a reader reads alone, bisected until the
row that kills is alone (see ``fitwork.engine.core.machine``).

`Source.files` shards data files: JSON Lines by byte ranges (a range holds the lines that
start inside it), Parquet by row groups, and CSV whole (a quoted field may hold a newline,
so a CSV file cannot be cut at a byte offset)::

    data/*.jsonl ──▶ Shard(path, "jsonl", 0, 8 MiB), Shard(path, "jsonl", 8 MiB, 16 MiB), …
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from fitwork.errors import InputError
from fitwork.resources import Resources
from fitwork.workload import Kind, Retry, Unit
from fitwork.workload.kernel import ChildFailed, Failed, Kernel

SPLIT_BYTES = 8 << 20
"""The largest byte range of a JSON Lines file (or compressed row groups of a Parquet file)
one shard covers."""
MAX_LINE_BYTES = 256 << 20
SKIP_BLOCK = 1 << 16
"""Bytes a reader passes at a time where a piece of a shard starts past its first row."""
FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv",
           ".parquet": "parquet"}
READER = "read"
"""The name of the reader unit a sharded run puts in front of the pipeline."""
STREAM_ROWS = 128
"""Rows a reader hands on at a time while an engine streams its rows (`streamed`)."""

RowStream = Callable[[Any, int, list[Any]], bool | None]
"""What an engine sets as a reader's ``stream``: called with the shard (or `Slice`) being
read, the number of the first row of a chunk, and the chunk's children, which it sends on
at once (the reader does not yield them)."""


class Slice(NamedTuple):
    """Rows ``[lo, hi)`` of the shard ``value`` (``hi`` None: to its end): what the run core
    sends a reader in a shard's place once a worker died holding it.  The reader yields those
    rows only, numbered as in the whole shard, and runs nothing on the others."""

    value: Any
    lo: int
    hi: int | None


class Children(NamedTuple):
    """What a reader that runs a filter or flat-map first unit yields for one row: that
    row's outputs, so a reader's n-th child is always its n-th row (its outputs are the
    n-th child's children), whichever rows a `Slice` of the shard holds."""

    values: list[Any]


def streamed(stream: RowStream | None, shard: Any, rows: Iterable[Any]) -> Iterator[Any]:
    """A reader's children: with a ``stream``, every `STREAM_ROWS` of them go to it as they
    are read and only the last, short chunk is yielded, so a reader killed mid-shard has
    handed on (and the engine reported) the rows before its last chunk.  A read that
    raises (a corrupt line of a shard read with ``bad_input="error"``) hands on every row
    before the fault first: they are delivered, and the shard's dead letter names the
    fault (an engine that does not stream, Ray's, delivers none of that shard).  A stream
    that answers False wants no more of the shard (it goes again as new pieces): the read
    stops there, yielding nothing."""
    if stream is None:
        yield from rows
        return
    lo = shard.lo if type(shard) is Slice else 0
    mark = getattr(stream, "mark_row", None)
    if mark is not None:  # the engine would know which row a death comes in
        rows = _marked(rows, mark, lo)
    chunk: list[Any] = []
    try:
        for row in rows:
            chunk.append(row)
            if len(chunk) >= STREAM_ROWS:
                if stream(shard, lo, chunk) is False:
                    return
                lo += len(chunk)
                chunk = []
    except Exception:
        if chunk:  # every row before the fault is handed on, whatever the chunk size
            stream(shard, lo, chunk)
        raise
    yield from chunk


def _marked(rows: Iterable[Any], mark: Callable[[int], None], first: int) -> Iterator[Any]:
    """``rows`` (numbered from ``first``), telling ``mark`` each row's number before it is
    read (and, in a reader that runs the first unit, run)."""
    found = iter(rows)
    number = first
    while True:
        mark(number)
        try:
            row = next(found)
        except StopIteration:
            return
        yield row
        number += 1


def sliced(rows: Iterable[Any], piece: Slice) -> Iterator[Any]:
    """The rows of ``piece`` among ``rows`` (the whole shard's), reading no further than
    its end."""
    for index, row in enumerate(rows):
        if piece.hi is not None and index >= piece.hi:
            return
        if index >= piece.lo:
            yield row


class Shard(NamedTuple):
    """One piece of one data file: a byte range (JSON Lines), row groups ``[start, stop)``
    (Parquet), or the whole file (CSV, ``stop`` = -1)."""

    path: str
    format: str
    start: int = 0
    stop: int = -1
    typed: bool = True

    def __str__(self) -> str:
        if self.stop < 0:
            return self.path
        unit = "row groups" if self.format == "parquet" else "bytes"
        return f"{self.path} [{unit} {self.start}-{self.stop}]"


@dataclass(frozen=True)
class Source:
    """Where a sharded run's items come from: ``shards`` (small, picklable descriptors) and
    ``read``, which a reader replica calls on one shard for its rows.

    ``read`` must be importable by name (a module-level function) when the run goes to a
    Ray cluster.  ``readers`` is how many reader replicas the run starts; ``describe`` says
    what the input is (a journal refuses to resume over another).
    """

    shards: Iterable[Any]
    read: Callable[[Any], Iterable[Any]]
    readers: int = 1
    describe: str = "shards"
    count: int | None = None

    @classmethod
    def of(cls, shards: Iterable[Any], read: Callable[[Any], Iterable[Any]],
           readers: int = 1) -> Source:
        """A source of your own shards: ``read(shard)`` yields the rows of one."""
        if not callable(read):
            raise InputError(f"Source.of: read={read!r} is not callable; pass a function that "
                             "yields the rows of one shard")
        if readers < 1:
            raise InputError(f"Source.of: readers={readers}: must be 1 or more")
        count = len(shards) if isinstance(shards, list | tuple) else None
        return cls(shards, read, readers, f"shards read by {_name(read)}", count)

    @classmethod
    def files(cls, *patterns: str | Path, split_bytes: int = SPLIT_BYTES,
              readers: int = 1, csv_types: bool = True, bad_input: str = "error") -> Source:
        """Shards of the data files ``patterns`` name: files, globs (``data/*.parquet``) or
        directories (every ``.jsonl``/``.csv``/``.parquet`` file in them, sorted).  Every
        name is checked now; a pattern that matches no data file is an error.
        ``bad_input="dead-letter"``: a line, row or row group the reader cannot read is
        that row's failure alone (file and byte offset, line or row group), not the shard's
        (`read_shard_tolerant`)."""
        if split_bytes < 1:
            raise InputError(f"Source.files: split_bytes={split_bytes}: must be 1 or more")
        if bad_input not in ("error", "dead-letter"):
            raise InputError(f"Source.files: bad_input={bad_input!r}: must be error or "
                             "dead-letter")
        paths = data_files(patterns)
        shards = [s for path in paths for s in file_shards(path, split_bytes, csv_types)]
        read = read_shard if bad_input == "error" else read_shard_tolerant
        return cls(shards, read, readers, " ".join(map(str, patterns)), len(shards))

    def reader(self, first: Unit | None = None) -> Unit:
        """The flat-map unit that reads one shard into its rows (no retries of its own: a
        shard whose read raises is retried by the run, then dead-lettered; one whose reader
        died is retried as `Slice`s, which it reads alone).

        With ``first`` (the pipeline's first unit, a plain one: `Unit.is_plain`), the reader
        runs it on each row as it reads, in the same replica: no replica and no hop of
        their own for the rows.  A row that unit fails on fails alone, named as that unit's
        failure of that row, as it would be in the unit's own replicas.
        """
        read = self.read
        if first is None:
            class Read:
                slices_rows = True  # the run core may send it a `Slice` of a shard
                stream: RowStream | None = None  # set by an engine that streams its rows

                def __call__(self, shard: Any) -> Iterator[Any]:
                    if type(shard) is Slice:
                        return streamed(self.stream, shard, read_slice(read, shard))
                    return streamed(self.stream, shard, read(shard))

            return Unit(fn=Read, name=READER, kind=Kind.FLAT_MAP,
                        resources=Resources(cpu=0.5), replicas=self.readers,
                        retry=Retry(attempts=1))

        class ReadThen:
            slices_rows = True  # the run core may send it a `Slice` of a shard
            stream: RowStream | None = None  # set by an engine that streams its rows

            def __init__(self) -> None:
                self.kernel = Kernel(first)  # a class unit: built once per replica

            def __call__(self, shard: Any) -> Iterator[Any]:
                return streamed(self.stream, shard, self.children(shard))

            def children(self, shard: Any) -> Iterator[Any]:
                """Each row's child: its output, or its failure."""
                kernel = self.kernel
                rows = read_slice(read, shard) if type(shard) is Slice else read(shard)
                single = kernel.kind is Kind.MAP
                for row in rows:
                    if type(row) is ChildFailed:  # a row the reader could not read
                        yield row
                        continue
                    raw = kernel.result(row)
                    if type(raw) is Failed:
                        yield ChildFailed(kernel.name, row, raw)
                    elif single:
                        yield raw
                    else:
                        yield Children(kernel.outputs(row, raw))

        return Unit(fn=ReadThen, name=READER, kind=Kind.FLAT_MAP,
                    resources=replace(first.resources, cpu=max(0.5, first.resources.cpu)),
                    replicas=max(self.readers, first.replicas), retry=Retry(attempts=1))


def data_files(patterns: Iterable[str | Path]) -> list[str]:
    """The data files the patterns name, in order, each pattern's matches sorted."""
    from fitwork.io.fs import expand, is_glob, is_url

    found: list[str] = []
    for pattern in patterns:
        text = os.fspath(pattern)
        if not is_url(text) and not is_glob(text):
            path = Path(text)
            if path.is_dir():
                matches = sorted(str(p) for p in path.iterdir()
                                 if p.is_file() and p.suffix.lower() in FORMATS
                                 and not p.name.startswith("."))
                if not matches:
                    raise InputError(f"input {text}: no .jsonl, .csv or .parquet file in the "
                                     "directory; check the --input path")
                found.extend(matches)
                continue
            if not path.is_file():
                raise InputError(f"input {text}: no such file; check the --input path")
            found.append(text)
            continue
        matches = [m for m in expand(text, files_only=True)
                   if Path(m).suffix.lower() in FORMATS]
        if not matches:
            raise InputError(f"input {text}: matches no .jsonl, .csv or .parquet file; check "
                             "the pattern")
        found.extend(matches)
    return found


def file_shards(path: str, split_bytes: int, typed: bool = True) -> list[Shard]:
    """One file's shards (reading only its size, or a Parquet file's footer)."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise InputError(f"input {path}: not a .jsonl, .csv or .parquet file; rename it or "
                         "leave it out of the pattern")
    if fmt == "csv":
        return [Shard(path, fmt, typed=typed)]
    if fmt == "parquet":
        return _parquet_shards(path, split_bytes)
    size = _size(path)
    return [Shard(path, fmt, start, min(start + split_bytes, size))
            for start in range(0, size, split_bytes)]


def _size(path: str) -> int:
    from fitwork.io.fs import is_url

    try:
        if is_url(path):
            import fsspec

            return int(fsspec.open(path).fs.size(path))
        return os.stat(path).st_size
    except OSError as exc:
        raise InputError(f"input {path}: cannot read its size ({exc.strerror or exc}); check "
                         "the path") from exc


def _parquet_shards(path: str, split_bytes: int) -> list[Shard]:
    """Runs of whole row groups of at most ``split_bytes`` (compressed) each."""
    from fitwork.io.formats import import_pyarrow
    from fitwork.io.fs import open_input

    pyarrow, parquet = import_pyarrow(f"input {path}")
    try:
        with open_input(path) as handle:
            meta = parquet.ParquetFile(handle).metadata
    except (pyarrow.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"input {path}: not a readable Parquet file ({exc}); check the "
                         "file") from exc
    shards: list[Shard] = []
    start, size = 0, 0
    for group in range(meta.num_row_groups):
        size += meta.row_group(group).total_byte_size
        if size >= split_bytes:
            shards.append(Shard(path, "parquet", start, group + 1))
            start, size = group + 1, 0
    if start < meta.num_row_groups:
        shards.append(Shard(path, "parquet", start, meta.num_row_groups))
    return shards


def read_shard(shard: Shard) -> Iterator[Any]:
    """The rows of one shard of a data file (what a reader replica runs)."""
    if shard.format == "jsonl":
        return _jsonl_range(shard)
    if shard.format == "parquet":
        return _parquet_groups(shard)
    from fitwork.io.inputs import read_items

    return read_items(shard.path, csv_types=shard.typed)


def read_shard_tolerant(shard: Shard) -> Iterator[Any]:
    """`read_shard`, but a line, row or row group that cannot be read comes out as a
    `ChildFailed` of the reader (the error, and the file and position as its input): it
    fails alone, and the shard's other rows are read."""
    if shard.format == "jsonl":
        return _jsonl_range(shard, tolerant=True)
    if shard.format == "parquet":
        return _parquet_groups(shard, tolerant=True)
    from fitwork.io.inputs import read_items
    from fitwork.io.unreadable import Unreadable

    return (_unreadable(row.where(), row.error) if type(row) is Unreadable else row
            for row in read_items(shard.path, csv_types=shard.typed, bad_input="dead-letter"))


def _unreadable(where: dict[str, Any], error: str) -> ChildFailed:
    """The reader's failure of one row it could not read."""
    return ChildFailed(READER, where, Failed(InputError(error), 1))


def read_slice(read: Callable[[Any], Iterable[Any]], piece: Slice) -> Iterator[Any]:
    """The rows of ``piece`` of a shard: a JSON Lines shard of `read_shard` (or its tolerant
    twin) passes the lines before them unparsed; any other is read whole and sliced."""
    shard = piece.value
    if (read in (read_shard, read_shard_tolerant) and type(shard) is Shard
            and shard.format == "jsonl"):
        rows = _jsonl_range(shard, read is read_shard_tolerant, skip=piece.lo)
        return sliced(rows, piece._replace(lo=0, hi=None if piece.hi is None
                                           else piece.hi - piece.lo))
    return sliced(read(shard), piece)


def _jsonl_range(shard: Shard, tolerant: bool = False, skip: int = 0) -> Iterator[Any]:
    """The JSON values of the lines that start in ``[start, stop)``: a reader skips the line
    the range begins inside of (the range before owns it) and reads past ``stop`` to finish
    its own last line.  The first ``skip`` rows (lines not blank) are passed unparsed."""
    from fitwork.io.fs import open_input

    with open_input(shard.path) as handle:
        position = shard.start
        if position:
            handle.seek(position - 1)
            position += len(handle.readline(MAX_LINE_BYTES + 1)) - 1
        if skip:
            position, skip = _skip_rows(handle, position, shard.stop, skip)
        while skip and position < shard.stop:  # the rows left, line by line
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            position += len(raw)
            while len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raw = handle.readline(MAX_LINE_BYTES + 1)  # a long line: one row
                position += len(raw)
            if position - len(raw) == 0 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if raw.strip():
                skip -= 1
        while position < shard.stop:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            at, position = position, position + len(raw)
            if len(raw) > MAX_LINE_BYTES:
                error = (f"input {shard.path}: line at byte {at} is longer than "
                         f"{MAX_LINE_BYTES:,} bytes; split the item")
                if not tolerant:
                    raise InputError(error)
                while raw and not raw.endswith(b"\n"):  # the rest of the line goes with it
                    raw = handle.readline(MAX_LINE_BYTES + 1)
                    position += len(raw)
                yield _unreadable({"file": shard.path, "byte": at}, error)
                continue
            if at == 0 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if not raw.strip():
                continue
            try:
                yield json.loads(raw)
            except (ValueError, RecursionError) as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                error = (f"input {shard.path}: line at byte {at}: invalid JSON "
                         f"({reason[:200]}); fix or remove that line")
                if not tolerant:
                    raise InputError(error) from None
                yield _unreadable({"file": shard.path, "byte": at,
                                   "text": raw[:1000].decode("utf-8", "replace")}, error)


def _skip_rows(handle: Any, position: int, stop: int, skip: int) -> tuple[int, int]:
    """Pass up to ``skip`` rows (lines not blank) from byte ``position`` (a line's start)
    on, a block at a time, of whole lines that end by ``stop``; the position after them
    (the handle put there) and the rows left to pass line by line.
    Passing a 1 MiB shard's 70,000 rows with a `readline` each cost 33 ms, most of what a
    death cost in a sharded run whose piece starts deep in its shard."""
    while skip and position < stop:
        block = handle.read(SKIP_BLOCK)
        # past the last whole line that ends by the shard's end (the rest: the next block)
        cut = block.rfind(b"\n", 0, min(len(block), stop - position)) + 1
        end = position + cut
        if not cut:  # a line longer than a block, or the one that crosses the shard's end
            break
        bom = position == 0 and block.startswith(b"\xef\xbb\xbf")
        rows = None if bom else _rows_if_alike(block, cut)
        if rows is not None and rows <= skip:
            position, skip = end, skip - rows
            handle.seek(position)
            continue
        lines = block[:cut - 1].split(b"\n")
        shown = [lines[0][3:], *lines[1:]] if bom else lines
        kept = list(map(bool, map(bytes.strip, shown)))
        if sum(kept) <= skip:
            position, skip = end, skip - sum(kept)
            handle.seek(position)
            continue
        for line, row in zip(lines, kept, strict=True):  # the last block: to the row
            position += len(line) + 1
            skip -= row
            if not skip:
                break
    handle.seek(position)
    return position, skip


def _rows_if_alike(block: bytes, end: int) -> int | None:
    """The lines of ``block[:end]`` (whole lines) where each starts with the byte the first
    does, not white space, so none is blank (JSON Lines of objects: every line a ``{``);
    else None.  Two counts, no line made: 0.1 ms a 64 KiB block here."""
    first = block[:1]
    if not first or first.isspace():
        return None
    lines = block.count(b"\n", 0, end)
    return lines if block.count(b"\n" + first, 0, end) == lines - 1 else None


def _parquet_groups(shard: Shard, tolerant: bool = False) -> Iterator[Any]:
    """The rows of row groups ``[start, stop)`` of a Parquet file, a batch at a time."""
    from fitwork.io.formats import import_pyarrow
    from fitwork.io.fs import open_input

    pyarrow, parquet = import_pyarrow(f"input {shard.path}")
    row = 0
    if tolerant:
        yield from _parquet_groups_tolerant(shard, pyarrow, parquet)
        return
    with open_input(shard.path) as handle:
        try:
            reader = parquet.ParquetFile(handle)
            for batch in reader.iter_batches(row_groups=range(shard.start, shard.stop),
                                             batch_size=4096):
                rows = batch.to_pylist()
                row += len(rows)
                yield from rows
        except (pyarrow.ArrowException, OSError, ValueError) as exc:
            raise InputError(f"input {shard}: row {row + 1} of the shard: Parquet data is "
                             f"corrupt ({' '.join(str(exc).split())[:200]}); rewrite the "
                             "file") from None


def _parquet_groups_tolerant(shard: Shard, pyarrow: Any, parquet: Any) -> Iterator[Any]:
    """`_parquet_groups` a row group at a time: one that fails to read is one
    `ChildFailed` (from the row it failed at to the group's end), and the next is read."""
    from fitwork.io.fs import open_input

    errors = (pyarrow.ArrowException, OSError, ValueError)
    with open_input(shard.path) as handle:
        try:
            reader = parquet.ParquetFile(handle)
        except errors as exc:
            raise InputError(f"input {shard}: not a readable Parquet file "
                             f"({' '.join(str(exc).split())[:200]}); check the file") from None
        row = 0
        for group in range(shard.start, shard.stop):
            size = reader.metadata.row_group(group).num_rows
            read = 0
            try:
                for batch in reader.iter_batches(row_groups=[group], batch_size=4096):
                    rows = batch.to_pylist()
                    read += len(rows)
                    yield from rows
            except errors as exc:
                error = (f"input {shard}: row {row + read + 1} of the shard (row group "
                         f"{group}): Parquet data is corrupt "
                         f"({' '.join(str(exc).split())[:200]}); rewrite the file")
                yield _unreadable({"file": shard.path, "row_group": group,
                                   "rows_of_shard": [row + read + 1, row + size]}, error)
            row += size


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


__all__ = ["SPLIT_BYTES", "STREAM_ROWS", "Children", "RowStream", "Shard", "Slice", "Source",
           "data_files", "file_shards", "read_shard", "read_shard_tolerant", "read_slice",
           "streamed"]
