"""Run journals: which source items are done and how much output is durable, for ``--resume``.

A journal is a directory holding ``journal.jsonl``: a header line saying what run it
belongs to (pipeline, input, output, fitwork version), then one line per checkpoint::

    {"spans": [[start, count], ...], "at": P, "outputs": N}

A checkpoint is taken where the outputs written so far end a span (`RunResult.
settled_spans`): every source item in the spans of this and earlier lines is done, and the
output up to position P holds exactly their N outputs (P is a JSON Lines output's size in
bytes, or a Parquet output's count of committed part files; see `fitwork.io.writers.open_writer`).
The output is made durable (fsync) before the line is written, and the line before the
next one starts, so after a crash the last whole line is true: a resumed run cuts the
output back to P and feeds only the items no line names.  Items in flight at the crash
were never journaled, so their outputs lie past P and are cut: each output ends up in the
output exactly once.  Dead letters are
kept whole (a failure of an item in flight at the crash may be written again).

The input is identified by what the run had read up to its last checkpoint, where the
run reads it through `fitwork.io.inputs.read_items` and its items end at byte offsets (JSON Lines
and CSV files, and globs or URLs of them): each line also holds
``"read": [file, offset, hash]``, a BLAKE2b hash of the input's bytes up to the end of the
furthest item done (``file`` counts the input's files in reading order; ``offset`` is in
bytes, or in lines for a CSV file, which is read as text).  A resumed run
hashes the same bytes of the input as it is now: a line repaired after them is read anew
(a run that stopped at a bad line resumes once the line is fixed), one changed before
them is refused, naming the file and the offset.  Other inputs (Parquet, a directory, a
sharded run's files) are identified whole, by their sizes and a hash of their ends.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from fitwork.errors import InputError
from fitwork.io.readers import InputReader
from fitwork.io.writers import sync_directory
from fitwork.version import __version__

JOURNAL_FILE = "journal.jsonl"
JOURNAL_VERSION = 3
"""Bumped when the line format changes; a journal of another version is refused.  3: an
input read by `fitwork.io.inputs.read_items` is identified by the prefix the run had read."""
CHECKPOINT_SECONDS = 1.0
"""How often a run takes a checkpoint (at the first span boundary after this long)."""
SAMPLE_BYTES = 1 << 20
"""Bytes hashed from each end of an input file to tell it from another of the same size."""


class JournalError(InputError):
    """A journal that cannot be used: missing, corrupt, or from another run."""


def input_identity(path: Path) -> dict[str, Any]:
    """What tells this input from another: its size and a hash of its ends (a file), or
    its entries' names and sizes (a directory)."""
    digest = hashlib.blake2b(digest_size=16)
    if not path.exists():  # a glob or a URL: the names and sizes of what it matches
        from fitwork.io.fs import expand, open_input

        entries = expand(str(path), files_only=True)
        for entry in entries:
            with open_input(entry) as held:
                digest.update(f"{entry}\0{held.seek(0, 2)}\n".encode())
        return {"input": str(path), "input_entries": len(entries),
                "input_hash": digest.hexdigest()}
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            digest.update(f"{file.relative_to(path)}\0{file.stat().st_size}\n".encode())
        return {"input": str(path.resolve()), "input_entries": len(files),
                "input_hash": digest.hexdigest()}
    size = path.stat().st_size
    with path.open("rb") as held:
        digest.update(held.read(SAMPLE_BYTES))
        if size > SAMPLE_BYTES:
            held.seek(max(SAMPLE_BYTES, size - SAMPLE_BYTES))
            digest.update(held.read(SAMPLE_BYTES))
    return {"input": str(path.resolve()), "input_bytes": size, "input_hash": digest.hexdigest()}


def identity(pipeline: str, input_path: Path, output_path: Path, **extra: Any
             ) -> dict[str, Any]:
    """The header of a journal for this run."""
    return {"journal": JOURNAL_VERSION, "pipeline": pipeline, **input_identity(input_path),
            "output": str(output_path.resolve()), **extra}


def _by_prefix(header: dict[str, Any], reader: InputReader | None) -> dict[str, Any]:
    """``header`` for a run that reads its input through ``reader``: where that gives byte
    offsets, the input's whole size and content give way to its files' names (the
    checkpoints then hash what was read)."""
    if reader is None or reader.files is None:
        return header
    names = hashlib.blake2b("\0".join(reader.files).encode(), digest_size=16).hexdigest()
    kept = {k: v for k, v in header.items()
            if k not in ("input_bytes", "input_entries", "input_hash")}
    return {**kept, "input_read": "prefix", "input_files": names}


def _by_lines(name: str) -> bool:
    """Whether positions in this input file count lines (CSV, read as text) or bytes."""
    return PurePath(name).suffix.lower() == ".csv"


def _extent(name: str, at: int) -> str:
    """``at`` as a stretch of this file: "1,200 bytes" or "40 lines"."""
    return f"{at:,} {'lines' if _by_lines(name) else 'bytes'}"


class Prefix:
    """A running hash of an input's bytes from its start, over its files in order, to a
    position in one of them: a byte offset, or the end of a line (a CSV file)."""

    def __init__(self, files: list[str]) -> None:
        self.files = files
        self.digest = hashlib.blake2b(digest_size=16)
        self.file, self.at = 0, 0
        self.handle: Any = None

    def _open(self) -> Any:
        from fitwork.io.fs import is_url, open_input

        name = self.files[self.file]
        return open_input(name, "rb", f"input {name}") if is_url(name) else open(name, "rb")

    def advance(self, file: int, at: int) -> bool:
        """Hash on to position ``at`` of file number ``file``; False if the input ends
        first."""
        while self.file < file or (self.file == file and self.at < at):
            if self.handle is None:
                self.handle = self._open()
            if self.file < file:  # the rest of a file the run has read past
                block = self.handle.read(1 << 20)
                if not block:
                    self.handle.close()
                    self.handle = None
                    self.digest.update(b"\0file\0")  # where one file ends, the next begins
                    self.file, self.at = self.file + 1, 0
                    continue
            elif _by_lines(self.files[file]):
                block = self.handle.readline()
                self.at += 1
            else:
                block = self.handle.read(min(at - self.at, 1 << 20))
                self.at += len(block)
            if not block:
                return False
            self.digest.update(block)
        return True

    def hexdigest(self) -> str:
        return self.digest.hexdigest()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def check_prefix(state: State, reader: InputReader, directory: Path) -> Prefix:
    """Refuse the input if the bytes the interrupted run had read (to the end of the
    furthest item done) differ now, naming the file and the offset; the running hash,
    there, to go on from."""
    prefix = Prefix(reader.files or [])
    read = state.read
    if read is None:
        if state.checkpoints:
            raise JournalError(f"journal {directory}: its last line does not say what the run "
                               f"had read; delete {directory} and run again without --resume")
        return prefix
    file, at, digest = read
    name = prefix.files[file] if file < len(prefix.files) else "?"
    fix = f"resume with the input as it was, or delete {directory} and run again without --resume"
    try:
        whole = prefix.advance(file, at)
    except OSError as exc:
        raise JournalError(f"journal {directory}: cannot read input {name} to check it "
                           f"({exc.strerror or exc}); {fix}") from None
    if not whole:
        raise JournalError(f"journal {directory}: input {name} is now shorter than the "
                           f"{_extent(name, at)} the interrupted run had finished; {fix}")
    if prefix.hexdigest() != digest:
        earlier = " (or a file before it)" if file else ""
        raise JournalError(f"journal {directory}: input {name}{earlier} changed within its "
                           f"first {_extent(name, at)}, which the interrupted run had "
                           f"finished (a line repaired after those is fine); {fix}")
    return prefix


@dataclass
class Done:
    """Source indices done, as sorted disjoint half-open intervals."""

    intervals: list[tuple[int, int]] = field(default_factory=list)

    def add(self, start: int, count: int) -> None:
        """Mark ``count`` items from ``start`` done."""
        if count <= 0:
            return
        end = start + count
        merged: list[tuple[int, int]] = []
        for lo, hi in self.intervals:
            if hi < start or lo > end:
                merged.append((lo, hi))
            else:
                start, end = min(lo, start), max(hi, end)
        merged.append((start, end))
        merged.sort()
        self.intervals = merged

    @property
    def count(self) -> int:
        """How many items are done."""
        return sum(hi - lo for lo, hi in self.intervals)

    def remaining(self, items: Iterable[Any]) -> Iterator[Any]:
        """The items of ``items`` not done, in order."""
        spans = iter(self.intervals)
        lo, hi = next(spans, (None, None))
        for index, item in enumerate(items):
            while hi is not None and index >= hi:
                lo, hi = next(spans, (None, None))
            if lo is not None and index >= lo:
                continue
            yield item


class Renumbering:
    """Maps a resumed run's source indices (0, 1, ... over the items not done) back to the
    original input's indices."""

    def __init__(self, done: Done) -> None:
        starts: list[int] = []  # first original index of each stretch of remaining items
        firsts: list[int] = []  # the resumed index it has
        position = resumed = 0
        for lo, hi in done.intervals:
            if lo > position:
                starts.append(position)
                firsts.append(resumed)
                resumed += lo - position
            position = max(position, hi)
        starts.append(position)  # everything from the last done item on
        firsts.append(resumed)
        self.starts, self.firsts = starts, firsts
        self.lengths = [b - a for a, b in zip(firsts, [*firsts[1:], -1], strict=True)]

    def original(self, start: int, count: int) -> list[tuple[int, int]]:
        """The original spans a resumed span covers (several where it crosses done items)."""
        spans: list[tuple[int, int]] = []
        k = bisect.bisect_right(self.firsts, start) - 1
        while count > 0:
            offset = start - self.firsts[k]
            room = self.lengths[k] - offset if self.lengths[k] >= 0 else count
            take = min(count, room)
            spans.append((self.starts[k] + offset, take))
            start, count, k = start + take, count - take, k + 1
        return spans


@dataclass
class State:
    """What a journal says: the run it belongs to, the items done, the durable output."""

    header: dict[str, Any]
    done: Done
    output_at: int = 0
    outputs: int = 0
    checkpoints: int = 0
    parts: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    """A sharded output's parts: file name -> committed ``(start, end, rows)`` ranges."""
    read: tuple[int, int, str] | None = None
    """The input read up to the furthest item done: file number, byte offset, hash."""


def began(directory: Path) -> bool:
    """Whether the journal in ``directory`` holds its header (its first whole line): a run
    stopped between making the directory and writing that line left nothing to resume."""
    try:
        with (directory / JOURNAL_FILE).open("rb") as held:
            return held.readline().endswith(b"\n")
    except OSError:
        return False


def load(directory: Path) -> State:
    """Read a journal; a torn last line (the crash came mid-write) is ignored."""
    path = directory / JOURNAL_FILE
    place = f"journal {path}"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise JournalError(f"{place}: no journal to resume; run again without "
                           "--resume") from None
    except OSError as exc:
        raise JournalError(f"{place}: cannot read: {exc.strerror or exc}") from None
    lines = raw.split(b"\n")
    lines.pop()  # after the last newline: empty, or a line the crash cut short
    if not lines:
        raise JournalError(f"{place}: empty (the run stopped before it began); run again "
                           "without --resume")
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError:
            raise JournalError(f"{place}: line {number} is corrupt; delete {directory} and "
                               "run again without --resume") from None
        records.append(record)
    header, checkpoints = records[0], records[1:]
    version = header.get("journal")
    if isinstance(version, int) and version != JOURNAL_VERSION:
        raise JournalError(f"{place}: written by a fitwork with journal version {version}, "
                           f"this one reads version {JOURNAL_VERSION}; finish that run with "
                           f"the fitwork that began it, or delete {directory} and run again "
                           "without --resume")
    if version != JOURNAL_VERSION:
        raise JournalError(f"{place}: not a fitwork journal; delete {directory} and run "
                           "again without --resume")
    done = Done()
    state = State(header=header, done=done)
    for number, record in enumerate(checkpoints, 2):
        try:
            for start, count in record["spans"]:
                done.add(int(start), int(count))
            state.output_at, state.outputs = int(record["at"]), int(record["outputs"])
            for name, ranges in record.get("parts", {}).items():
                if not isinstance(name, str) or "/" in name or name.startswith(".."):
                    raise ValueError(f"part name {name!r}")
                state.parts[name] = [(int(a), int(b), int(n)) for a, b, n in ranges]
            if "read" in record:
                file, at, digest = record["read"]
                state.read = (int(file), int(at), str(digest))
        except (KeyError, TypeError, ValueError):
            raise JournalError(f"{place}: line {number} is corrupt; delete {directory} and "
                               "run again without --resume") from None
    state.checkpoints = len(checkpoints)
    return state


def check_same_run(state: State, header: dict[str, Any], directory: Path) -> None:
    """Refuse a journal written for another pipeline, input or output, naming what differs."""
    names = {"pipeline": "pipeline", "units": "units", "input": "input",
             "input_read": "way of identifying the input",
             "input_bytes": "input's size", "input_entries": "input's files",
             "input_files": "input's files", "input_hash": "input's content",
             "output": "output"}
    for key, name in names.items():
        was, now = state.header.get(key), header.get(key)
        if was != now:
            shown = ("" if key in ("input_hash", "input_files")
                     else f" (journal: {was}; this run: {now})")
            raise JournalError(
                f"journal {directory}: its {name} differs{shown}; resume with the same "
                f"command, or delete {directory} and run again without --resume")


class Journal:
    """An open journal: `checkpoint` appends a line durably; `finish` removes it."""

    def __init__(self, directory: Path, state: State, renumber: Renumbering | None,
                 reader: InputReader | None = None, prefix: Prefix | None = None) -> None:
        self.directory = directory
        self.state = state
        self.renumber = renumber
        self.reader = reader if reader is not None and reader.files is not None else None
        self.prefix = prefix
        if self.reader is not None:
            done = state.done.intervals
            self.reader.track(done[-1][1] - 1 if done else 0)
            if self.prefix is None:
                self.prefix = Prefix(self.reader.files or [])
        self.file = (directory / JOURNAL_FILE).open("ab")

    @classmethod
    def start(cls, directory: Path, header: dict[str, Any],
              reader: InputReader | None = None) -> Journal:
        """A new journal for a run starting from the first item; refuses to replace the
        journal of a run that did not finish.  ``reader`` (the run's `read_items`) lets
        the journal identify the input by what the run has read."""
        header = _by_prefix(header, reader)
        if (directory / JOURNAL_FILE).exists():
            raise JournalError(
                f"journal {directory}: an interrupted run into this output left it; pass "
                f"--resume to continue that run, or delete {directory} to start over")
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / JOURNAL_FILE
        with path.open("wb") as held:
            held.write(json.dumps({**header, "fitwork_version": __version__}).encode() + b"\n")
            held.flush()
            os.fsync(held.fileno())
        sync_directory(directory)
        return cls(directory, State(header=header, done=Done()), None, reader)

    @classmethod
    def resume(cls, directory: Path, header: dict[str, Any],
               reader: InputReader | None = None) -> Journal:
        """The journal of an interrupted run of the same command, to continue it (refused
        if the input changed where the run had read it; see the module docstring)."""
        state = load(directory)
        check_same_run(state, _by_prefix(header, reader), directory)
        prefix = None
        if reader is not None and reader.files is not None:
            prefix = check_prefix(state, reader, directory)
        return cls(directory, state, Renumbering(state.done), reader, prefix)

    def checkpoint(self, spans: Sequence[tuple[int, int]], output_at: int,
                   outputs: int, parts: dict[str, list[tuple[int, int, int]]] | None = None
                   ) -> None:
        """Record ``spans`` (this run's indices) done, with the output durable up to
        position ``output_at`` holding ``outputs`` outputs (a sharded output: ``parts``, the
        committed ranges of each part changed since the last line).  The output must be
        synced first."""
        original = [s for start, count in spans for s in (
            self.renumber.original(start, count) if self.renumber else [(start, count)])]
        line: dict[str, Any] = {"spans": _merge(original), "at": output_at, "outputs": outputs}
        if parts:
            line["parts"] = {name: [list(r) for r in ranges] for name, ranges in parts.items()}
            self.state.parts.update(parts)
        read = self._read(original)
        if read is not None:
            line["read"] = list(read)
        self.file.write(json.dumps(line, separators=(",", ":")).encode() + b"\n")
        self.file.flush()
        os.fsync(self.file.fileno())
        for start, count in original:
            self.state.done.add(start, count)
        self.state.output_at, self.state.outputs = output_at, outputs
        self.state.read = read if read is not None else self.state.read

    def _read(self, spans: list[tuple[int, int]]) -> tuple[int, int, str] | None:
        """What the run has read up to the end of the furthest item done once ``spans``
        (original indices) are: the file number, the offset and the hash of the bytes."""
        if self.reader is None or self.prefix is None:
            return None
        furthest = max([start + count for start, count in spans]
                       + [hi for _, hi in self.state.done.intervals[-1:]]) - 1
        if furthest < 0 or not self.reader.has_read(furthest):
            # a resumed run that has not yet read as far as the items done before it: what
            # the last checkpoint read still vouches for every item done
            return None
        end = self.reader.end_of(furthest)
        if end is None:  # not read while tracking: the journal can no longer vouch for it
            raise JournalError(f"journal {self.directory}: cannot tell where item "
                               f"{furthest + 1} of the input ends; run again without --resume")
        self.prefix.advance(*end)
        return (*end, self.prefix.hexdigest())

    def close(self) -> None:
        """Close the file, keeping the journal (the run did not finish)."""
        self.file.close()
        if self.prefix is not None:
            self.prefix.close()

    def finish(self) -> None:
        """The run finished: the journal is no longer needed."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


Durable = Callable[[], tuple[int, int, "dict[str, list[tuple[int, int, int]]] | None"]]
"""Makes an output durable and says what a checkpoint records of it: its position, how many
outputs it holds, and (parts written by replicas) each changed part's committed ranges."""


class Checkpoints:
    """Takes a run's checkpoints while its outputs are written (a file's, or the parts its
    replicas write): at the first span boundary after every `CHECKPOINT_SECONDS`, and at
    the end."""

    def __init__(self, journal: Journal, result: Any, durable: Durable,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.journal, self.result, self.durable, self.clock = journal, result, durable, clock
        self.due = clock() + CHECKPOINT_SECONDS

    def written(self, consumed: int) -> None:
        """The run's first ``consumed`` outputs are in the output."""
        if self.clock() < self.due:
            return
        spans = self.result.settled_spans(consumed)
        if spans:
            self.take(spans)

    def end(self, consumed: int) -> None:
        """Every output is written: the last checkpoint."""
        spans = self.result.settled_spans(consumed)
        if spans:
            self.take(spans)

    def take(self, spans: Sequence[tuple[int, int]]) -> None:
        """Make the output durable, then journal ``spans`` done."""
        at, outputs, parts = self.durable()
        self.journal.checkpoint(spans, at, outputs, parts)
        self.due = self.clock() + CHECKPOINT_SECONDS


def _merge(spans: list[tuple[int, int]]) -> list[list[int]]:
    """Adjacent spans joined, in order (a line stays short however many frames it covers)."""
    merged: list[list[int]] = []
    for start, count in sorted(spans):
        if merged and merged[-1][0] + merged[-1][1] == start:
            merged[-1][1] += count
        else:
            merged.append([start, count])
    return merged
