"""Sharded sinks: the last unit's replicas write output parts, the driver keeps the books.

Each replica of the last unit appends its outputs to a part file of its own, written aside
as ``.part-<run>-<worker>.<ext>.inprogress`` in the output directory.  In the run's books
each output then travels as where it landed, ``(worker, start, end)``, in place of its
value: a `Written` message (local engine) or the call's summary (Ray) brings those places
to the driver as the outputs' arrival, and the run core accepts each output once, as it
does any output.  The driver records the places it accepted (`PartBooks.accept`, joined
into byte ranges).  When the run ends or stops, `PartBooks.seal` keeps exactly those bytes
of each part, renames it to ``part-<run>-<worker>.<ext>``, deletes parts nothing was
accepted from, and writes ``_manifest.json`` (aside, then renamed) naming every part with
its rows and bytes::

    replica ──append──▶ .part-R-W.jsonl.inprogress       driver: accepted byte ranges
            ──Written(books: (W, start, end) per output)──▶ core ──▶ │ seal
                                     part-R-W.jsonl ◀── keep ranges, rename ┘ + _manifest.json

What the books do not accept never reaches the output: bytes a replica wrote before it was
killed and could report, and outputs a retried item made again (a shard re-read after a
reader died mid-shard).  So every output row is in exactly one committed part.  The output
directory must be one the driver can reach by path (this host's disk, or a filesystem
every node mounts).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from fitwork.errors import InputError
from fitwork.io.writers import json_default, sync_directory

MANIFEST = "_manifest.json"
FORMATS = ("jsonl", "csv")
_PART = re.compile(r"\.?part-([0-9a-f]+)-(\d+)\.(jsonl|csv)(\.inprogress)?")


@dataclass(frozen=True)
class Sink:
    """A directory the last unit's replicas write output parts into (`fitwork.run`'s
    ``output=``; ``fitwork run --output DIR/``).  ``format`` is ``"jsonl"`` or ``"csv"`` (a
    CSV part's columns are its first row's keys)."""

    directory: Path
    format: str = "jsonl"
    kept: tuple[tuple[str, tuple[tuple[int, int, int], ...]], ...] = ()
    """Parts an interrupted run committed, ``(file name, ((start, end, rows), ...))``, that a
    resumed run keeps (from its journal) instead of clearing the directory."""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise InputError(f"sink {self.directory}: format {self.format!r} is not one of "
                             f"{', '.join(FORMATS)}; choose one")
        object.__setattr__(self, "directory", Path(self.directory))

    @classmethod
    def files(cls, directory: str | Path, format: str = "jsonl") -> Sink:
        """Output parts in ``directory`` (created if missing)."""
        return cls(Path(directory), format)

    def aside(self, run_id: str, worker: int) -> Path:
        """Where a replica writes its part while the run goes on."""
        return self.directory / f".part-{run_id}-{worker:05d}.{self.format}.inprogress"

    def committed(self, run_id: str, worker: int) -> Path:
        """The name a part has once sealed."""
        return self.directory / f"part-{run_id}-{worker:05d}.{self.format}"


class Written(NamedTuple):
    """Outputs a replica wrote to its part: their ``segments``, each value replaced by where
    it lies, ``(worker, start, end)`` (the run core's books)."""

    segments: list[Any]


class PartWriter:
    """One replica's part file: outputs appended as JSON lines or CSV rows."""

    def __init__(self, sink: Sink, run_id: str, worker: int) -> None:
        self.sink, self.worker = sink, worker
        self.path = sink.aside(run_id, worker)
        self.columns: list[str] | None = None
        self.header = False
        self.handle = open(self.path, "wb")  # noqa: SIM115 (closed by close())

    def encode(self, value: Any) -> bytes:
        """One output as the bytes of its line; a TypeError or ValueError if it cannot be."""
        if self.sink.format == "jsonl":
            return json.dumps(value, default=json_default, ensure_ascii=False).encode() + b"\n"
        row = value if isinstance(value, dict) else {"value": value}
        if self.columns is None:
            self.columns = list(row)
        elif list(row) != self.columns:
            differ = set(self.columns) ^ set(row)
            raise ValueError(f"columns {sorted(differ)} differ from the part's first row; give "
                             "every output the same fields, or write JSON Lines")
        return _csv_line([_cell(row[name]) for name in self.columns])

    def write(self, lines: list[bytes]) -> list[tuple[int, int, int]]:
        """Append encoded rows (a CSV part's header first); where each landed, as the
        ``(worker, start, end)`` the run's books carry for it in place of its value."""
        if not lines:
            return []
        if not self.header and self.columns is not None:
            self.handle.write(_csv_line(self.columns))
            self.header = True
        self.handle.writelines(lines)
        self.handle.flush()
        places = []
        end = self.handle.tell() - sum(map(len, lines))
        for line in lines:
            start, end = end, end + len(line)
            places.append((self.worker, start, end))
        return places

    def close(self) -> None:
        """Close the file (the seal, not the replica, decides what of it counts)."""
        self.handle.close()


def _csv_line(cells: list[Any]) -> bytes:
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerow(cells)
    return text.getvalue().encode()


def _cell(value: Any) -> Any:
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, default=json_default, ensure_ascii=False)
    return value


class PartBooks:
    """The driver's record of every part: the byte ranges committed, and the seal."""

    def __init__(self, sink: Sink, run_id: str) -> None:
        self.sink, self.run_id = sink, run_id
        # part file name -> committed (start, end, rows), this run's and kept ones
        self.parts: dict[str, list[tuple[int, int, int]]] = {
            name: list(ranges) for name, ranges in sink.kept}
        self.names: dict[int, str] = {}  # this run's worker -> its part's file name
        self.touched: set[str] = set()  # parts accepted into since the last `sync`
        self.sealed = False

    def prepare(self) -> None:
        """Create the directory; remove parts and the manifest a previous run left (a run
        replaces its output, as a file output is replaced), except parts kept for a resume."""
        place = f"output {self.sink.directory}"
        try:
            self.sink.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"{place}: cannot create the directory ({exc.strerror or exc}); "
                             "check the --output path") from exc
        if not self.sink.directory.is_dir():
            raise InputError(f"{place}: not a directory; give --output a directory path")
        for name, ranges in self.parts.items():  # sealed by a run that died after
            sealed = self.sink.directory / name.removeprefix(".").removesuffix(".inprogress")
            if (self.sink.directory / name).exists() or not sealed.is_file():
                continue
            check = sorted(ranges)
            if self.sink.format == "csv" and check:  # the header line precedes the rows
                check = [(0, check[0][0], 0), *check]
            if not _from_start(check):  # the seal moved bytes: the ranges do not apply
                raise InputError(f"{place}: the interrupted run died while sealing part "
                                 f"{sealed.name}; delete {self.sink.directory} and the "
                                 "journal and run again without --resume")
            os.replace(sealed, self.sink.directory / name)  # cut back to the journal's end
        for entry in self.sink.directory.iterdir():
            if entry.name in self.parts:
                continue
            if entry.name == MANIFEST or _PART.fullmatch(entry.name):
                entry.unlink(missing_ok=True)
        missing = [name for name in self.parts if not (self.sink.directory / name).is_file()]
        if missing:
            raise InputError(f"{place}: part {missing[0]} of the interrupted run is gone; "
                             "delete the journal and run again without --resume")

    def accept(self, places: Iterable[tuple[int, int, int]]) -> None:
        """The run's books took these outputs (each ``(worker, start, end)`` in its part):
        they are committed.  An output the books refused (a duplicate a retried item made
        again) never comes here, so the seal leaves its bytes out."""
        parts, names = self.parts, self.names
        for worker, start, end in places:
            name = names.get(worker)
            if name is None:
                name = names[worker] = self.sink.aside(self.run_id, worker).name
            ranges = parts.get(name)
            self.touched.add(name)
            if ranges is None:
                parts[name] = [(start, end, 1)]
            elif ranges[-1][1] == start:
                first, _, rows = ranges[-1]
                ranges[-1] = (first, end, rows + 1)
            else:
                ranges.append((start, end, 1))

    def sync(self) -> dict[str, list[tuple[int, int, int]]]:
        """Make the parts accepted into since the last call durable (fsync); their committed
        ranges, for a journal line."""
        changed = {}
        for name in sorted(self.touched):
            path = self.sink.directory / name
            with open(path, "rb") as held:
                os.fsync(held.fileno())
            changed[name] = list(self.parts[name])
        self.touched.clear()
        return changed

    def seal(self) -> dict[str, Any]:
        """Keep only the committed bytes of every part, rename it, delete what holds
        nothing committed, and write the manifest; returns it.  Safe to call twice.

        A part's committed bytes are one run from its start unless it holds outputs the
        books refused (a retried item's outputs made again) or whose report was lost while
        the writer lived on (a Ray caller that died): then the committed ranges are copied
        out, byte for byte, in order, and the original goes only once the manifest is
        written (a run killed while sealing resumes from it)."""
        if self.sealed:
            return self._manifest()
        directory = self.sink.directory
        parts = []
        originals: list[Path] = []  # parts copied out, removed once the manifest is written
        kept = {name for name, _ in self.sink.kept}
        for entry in sorted(directory.iterdir()):
            match = _PART.fullmatch(entry.name)
            if match is None or not match.group(4) or (
                    match.group(1) != self.run_id and entry.name not in kept):
                continue
            ranges = sorted(self.parts.get(entry.name, []))
            rows = sum(r for _, _, r in ranges)
            if rows == 0:
                entry.unlink(missing_ok=True)
                continue
            final = self.sink.committed(match.group(1), int(match.group(2)))
            size, left = _keep(entry, ranges, self.sink.format == "csv", final)
            if left:
                originals.append(entry)
            parts.append({"name": final.name, "rows": rows, "bytes": size})
        manifest = {"run_id": self.run_id, "format": self.sink.format,
                    "rows": sum(p["rows"] for p in parts), "parts": parts}
        aside = directory / f".{MANIFEST}.tmp"
        with open(aside, "w", encoding="utf-8") as held:
            json.dump(manifest, held, indent=1)
            held.flush()
            os.fsync(held.fileno())
        os.replace(aside, directory / MANIFEST)
        for original in originals:
            original.unlink(missing_ok=True)
        sync_directory(directory)
        self.sealed = True
        return manifest

    def _manifest(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.sink.directory / MANIFEST).read_text()))
        except (OSError, ValueError):
            return {}


def _from_start(ranges: list[tuple[int, int, int]]) -> bool:
    """Whether sorted byte ranges run from byte 0 without a gap."""
    return bool(ranges) and ranges[0][0] == 0 and all(
        a[1] == b[0] for a, b in itertools.pairwise(ranges))


def _keep(path: Path, ranges: list[tuple[int, int, int]], header: bool,
          final: Path) -> tuple[int, bool]:
    """Keep only the byte ranges given (sorted) of ``path``, as ``final``; its size, made
    durable, and whether ``path`` is left behind.  With ``header`` (a CSV part) the first
    line is kept too: the range that held it may be one whose report was lost.

    Ranges that run from byte 0 without a gap are kept by cutting ``path`` back and renaming
    it: the bytes keep their offsets.  Ranges with gaps are copied out into ``final`` and
    ``path`` is left whole, for the seal to remove once the manifest is written: until then
    a resume still finds the offsets its journal names."""
    with open(path, "r+b") as held:
        if header and ranges[0][0] != 0:
            ranges = [(0, len(held.readline()), 0), *ranges]
        if _from_start(ranges):
            size = ranges[-1][1]
            held.truncate(size)
            held.flush()
            os.fsync(held.fileno())
        else:
            with open(final, "wb") as out:
                for start, end, _ in ranges:
                    held.seek(start)
                    out.write(held.read(end - start))
                size = out.tell()
                out.flush()
                os.fsync(out.fileno())
            return size, True
    os.replace(path, final)
    return size, False


def read_parts(directory: str | Path) -> list[Any]:
    """Every output row of a sealed sink directory, part by part in the manifest's order
    (JSON Lines parts as values; CSV parts as dicts of strings)."""
    directory = Path(directory)
    manifest = json.loads((directory / MANIFEST).read_text())
    rows: list[Any] = []
    for part in manifest["parts"]:
        path = directory / part["name"]
        if manifest["format"] == "jsonl":
            rows.extend(json.loads(line) for line in path.read_bytes().splitlines() if line)
        else:
            with open(path, newline="", encoding="utf-8") as held:
                rows.extend(csv.DictReader(held))
    return rows


__all__ = ["MANIFEST", "PartBooks", "PartWriter", "Sink", "Written", "read_parts"]
