"""The writers of a run's outputs (JSON Lines, Parquet, Parquet in parts a journal can
resume), what JSON cannot hold by itself, and the order-independent digest of outputs."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path, PurePath
from types import TracebackType
from typing import IO, Any

import numpy as np

from fitwork.errors import InputError
from fitwork.io.formats import file_format, import_pyarrow, one_line, os_reason

PARQUET_BATCH_ROWS = 10_000
FLUSH_EVERY = 100


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
                f"{self._place}: cannot create the parent directory ({os_reason(exc)}); "
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
                f"{self._place}: cannot open for writing ({os_reason(exc)}); "
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
                                 f"({os_reason(exc)}); run again without --resume") from exc
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
            raise self._unencodable(f"it ({one_line(exc)})") from exc
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


class JsonLinesStream(JsonLinesWriter):
    """JSON Lines onto a binary stream the caller opened (``fitwork run --output -``:
    stdout), flushed every `FLUSH_EVERY` lines and at the end; never closed here, and
    with no position a journal could resume from."""

    def __init__(self, stream: IO[bytes], name: str = "stdout") -> None:
        self.path, self.count, self.closed = Path(name), 0, False
        self._place = f"output {name}"
        self._handle, self._unflushed = stream, 0

    def sync(self) -> int:
        """Push the lines written so far on; a stream has no position to record."""
        self.flush()
        return 0

    def close(self) -> None:
        """Flush; the stream stays open for whoever gave it."""
        if not self.closed:
            self.closed = True
            self.flush()


class ParquetOutputWriter(OutputWriter):
    """Rows buffered and written as record batches of up to `PARQUET_BATCH_ROWS` rows."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._pyarrow, self._parquet = import_pyarrow(self._place)
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
                f"{self._place}: {span}: write failed ({one_line(exc)}); check the disk"
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
                f"{self._place}: {span}: cannot convert to Parquet ({one_line(exc)}); give "
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
        self._pyarrow, self._parquet = import_pyarrow(self._place)
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
                             f"({os_reason(exc)}); check the --output path") from exc

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
                part = _part_index(entry.name)
                if part is None or part >= count:
                    entry.unlink(missing_ok=True)
        if count:
            try:
                self._schema = self._parquet.read_schema(self._part(0))
            except (self._pyarrow.ArrowException, OSError) as exc:
                raise InputError(
                    f"{self._place}: part {self._part(0).name} is unreadable "
                    f"({one_line(exc)}); delete the journal and run again without --resume"
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
                             f"({one_line(exc)}); check the disk") from exc
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
                             f"({one_line(exc)}); they stay in {self.parts_dir}") from exc

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
    if file_format(Path(path)) == "parquet":
        if journaled or resume_at is not None:
            return PartedParquetWriter(path, resume_at)
        return ParquetOutputWriter(path)
    return JsonLinesWriter(path, resume_at)


class OutputDigest:
    """An order-independent digest of a run's outputs: equal digests, equal multisets.

    Each output is written as canonical JSON (sorted keys; what JSON cannot hold as a JSON
    Lines output writes it, `json_default`, else by its ``repr``) and hashed with BLAKE2b to
    64 bits; the digest is the sum of the hashes modulo 2**64, so it does not depend on the
    order outputs arrived in.  Outputs read back from a JSON Lines file or part therefore
    digest as the values that were written.
    """

    def __init__(self) -> None:
        self.total = 0
        self.count = 0

    def add(self, value: Any) -> None:
        """Count one output."""
        text = json.dumps(value, sort_keys=True, default=_digested, separators=(",", ":"))
        self.total = (self.total + int.from_bytes(
            hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")) % (1 << 64)
        self.count += 1

    def hexdigest(self) -> str:
        """``<count>:<16 hex digits>``."""
        return f"{self.count}:{self.total:016x}"


def kept_outputs(path: Path, resume_at: tuple[int, int], start: int = 0) -> Iterator[Any]:
    """The outputs an interrupted run wrote that its resume keeps (`open_writer`'s
    ``resume_at``): a JSON Lines output's values from byte ``start`` (where an appended
    run began) to the position; a Parquet output's committed parts' rows."""
    position, _ = resume_at
    if file_format(path) == "parquet":
        _, parquet = import_pyarrow(f"output {path}")
        parts = path.with_name(path.name + ".parts")
        for index in range(position):
            yield from parquet.read_table(parts / f"part-{index:06d}.parquet").to_pylist()
        return
    with open(path, "rb") as handle:
        handle.seek(start)
        while handle.tell() < position:
            line = handle.readline()
            if not line:
                return
            if line.strip():
                yield json.loads(line)


def _digested(value: Any) -> Any:
    """What a digest hashes for a value JSON cannot hold: as written, else its ``repr``."""
    try:
        return json_default(value)
    except TypeError:
        return repr(value)
