"""A run that writes its own outputs (`fitwork.run(..., output=, journal=, resume=)`).

Into a file (JSON Lines or Parquet) written here, or a directory whose parts the last
unit's replicas write (`fitwork.Sink`); its record carries the digest of the outputs it
wrote (`fitwork.io.inputs.OutputDigest`: a directory's are read back from its parts once sealed,
so the same outputs give the same digest either way).  With a journal, checkpoints are
taken as outputs become durable (`fitwork.io.journal.Checkpoints`, one way for both kinds of
output), and ``resume=True`` continues an interrupted run: only the items (or shards) no
checkpoint names run, and the output keeps every output once.  A run that stops having
done no item removes its journal and the empty output it made, so it can simply run again.

`fitwork run` is this, for its file and its directory outputs alike.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import shutil
from collections.abc import Generator, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeGuard

from fitwork.engine.contract import RunResult
from fitwork.engine.parts import MANIFEST, Sink
from fitwork.errors import UnitDefinitionError
from fitwork.io.fs import is_glob
from fitwork.io.journal import JOURNAL_VERSION, Checkpoints, Journal, began, identity
from fitwork.io.readers import InputReader
from fitwork.io.shards import Source
from fitwork.io.writers import (
    JsonLinesStream,
    OutputDigest,
    OutputWriter,
    kept_outputs,
    open_writer,
)

if TYPE_CHECKING:
    from fitwork.runner import Launch
    from fitwork.telemetry.record import RunRecord
    from fitwork.workload.pipeline import Pipeline

Ranges = dict[str, list[tuple[int, int, int]]]


def names_directory(output: str | Path) -> bool:
    """Whether ``output`` names a directory: an existing one, or a path ending in ``/``."""
    text = os.fspath(output)
    return text.endswith("/") or Path(text).is_dir()


class _File:
    """Outputs written to a file (or a stream) by this process, and digested as they are;
    a resumed run's digest starts from the outputs it keeps (``kept``), so it is the whole
    output's."""

    def __init__(self, writer: OutputWriter, kept: Iterable[Any] = ()) -> None:
        self.writer, self.digest, self.made = writer, OutputDigest(), 0
        for value in kept:
            self.digest.add(value)

    @property
    def count(self) -> int:
        """Outputs the file holds (an earlier run's kept ones included)."""
        return self.writer.count

    def take(self, value: Any) -> None:
        self.writer.write(value)
        self.digest.add(value)
        self.made += 1

    def durable(self) -> tuple[int, int, Ranges | None]:
        return self.writer.sync(), self.writer.count, None

    def finish(self, journal: Journal, checkpoints: Checkpoints) -> None:
        """The run ended: the last checkpoint, the file whole, then the journal gone."""
        checkpoints.end(self.made)
        self.writer.close()  # whole, before the journal that could redo it goes
        journal.finish()
        self.writer.cleanup()

    def close(self) -> None:
        self.writer.close()

    def digested(self, run_id: str) -> str | None:
        return self.digest.hexdigest()


class _Parts:
    """Outputs the last unit's replicas write into a directory's parts: the run yields how
    many each step committed."""

    def __init__(self, directory: Path, result: RunResult) -> None:
        self.directory, self.result, self.count = directory, result, 0

    @property
    def made(self) -> int:
        return self.count

    def take(self, value: int) -> None:
        self.count += value

    def durable(self) -> tuple[int, int, Ranges | None]:
        return 0, self.count, self.result.sync_parts()

    def finish(self, journal: Journal, checkpoints: Checkpoints) -> None:
        """The run ended and its parts are sealed: nothing is left to resume."""
        journal.finish()

    def close(self) -> None:
        pass

    def digested(self, run_id: str) -> str | None:
        """The digest of the rows of every part the seal listed (a resume's kept ones too:
        the whole output's), read back from its manifest; None where this run sealed
        none."""
        try:
            manifest = json.loads((self.directory / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        if manifest.get("run_id") != run_id:
            return None
        digest = OutputDigest()
        for part in manifest.get("parts", []):
            for row in _rows(self.directory / part["name"], manifest["format"]):
                digest.add(row)
        return digest.hexdigest()


def sweep_stale_parts(output: Path) -> bool:
    """Remove ``OUTPUT.parts`` a journaled Parquet run left when it was stopped between
    removing its journal and its parts (its output already joined them); whether it did.
    Stale only if the output is at least as new as every part and no journal sits beside
    it (a journaled run's own start removes them once its journal is taken)."""
    parts = output.with_name(output.name + ".parts")
    if not parts.is_dir() or not output.is_file() \
            or output.with_name(output.name + ".journal").exists():
        return False
    try:
        joined = output.stat().st_mtime
        if any(entry.stat().st_mtime > joined for entry in parts.iterdir()):
            return False
    except OSError:  # gone meanwhile, or unreadable: left as it is
        return False
    shutil.rmtree(parts, ignore_errors=True)
    return True


def _rows(path: Path, format: str) -> Iterator[Any]:
    """A sealed part's rows: JSON Lines values, or a CSV part's rows as dicts of text."""
    if format == "jsonl":
        with open(path, "rb") as lines:
            yield from (json.loads(line) for line in lines if line.strip())
    else:
        with open(path, newline="", encoding="utf-8") as text:
            yield from csv.DictReader(text)


def _is_stream(output: object) -> TypeGuard[IO[bytes]]:
    """Whether ``output`` is an open binary stream (has ``write``), not a path or a sink."""
    return hasattr(output, "write") and not isinstance(output, str | Path | Sink)


class _Output:
    """The engine-contract run (`fitwork.engine.contract.Run`) behind a `Run`: it opens the
    journal and the output, starts the engine, writes each turn's outputs, checkpoints,
    and settles the record with the output's digest."""

    def __init__(self, launch: Launch, pipeline: Pipeline, source: Iterable[Any],
                 output: str | Path | Sink | IO[bytes], journal: Path | None, resume: bool,
                 append: bool, limit: int | None) -> None:
        self.launch, self.pipeline, self.source, self.limit = launch, pipeline, source, limit
        self.stream = output if _is_stream(output) else None
        self.sink: Sink | None = None
        if isinstance(output, Sink):
            self.sink, self.path = output, output.directory
        elif self.stream is not None:
            name = getattr(self.stream, "name", None)
            self.path = Path(name if isinstance(name, str) else "-")
        else:
            assert isinstance(output, str | Path)
            self.sink = Sink.files(output) if names_directory(output) else None
            self.path = Path(output)
        self.directory, self.resume, self.append = journal, resume, append
        self.journal: Journal | None = None
        self.note = ""
        self.recorded: RunRecord | None = None
        self.result: RunResult | None = None
        self.into: _File | _Parts | None = None
        self.failed: BaseException | None = None
        self.existed = False

    def start(self) -> None:
        """Open the journal and the output, and start the engine (once)."""
        if self.into is not None or self.failed is not None:
            return
        self.existed = self.stream is None and self.path.exists()
        writer: OutputWriter | None = None
        try:
            if self.sink is None and self.stream is None and not self.append and (
                    self.directory is None or not self.directory.exists()):
                sweep_stale_parts(self.path)  # no journal of this run's can need them
            source, sink, keep, resume_at, start = self._journal()
            if self.sink is None:
                writer = (JsonLinesStream(self.stream) if self.stream is not None else
                          open_writer(self.path, resume_at, journaled=self.journal is not None))
                kept = kept_outputs(self.path, resume_at, start) if self.resume and resume_at \
                    else ()
                self.into = _File(writer, kept)
            self.result = self.launch(source, sink, self.journal is not None, keep)
            if self.sink is not None:
                self.into = _Parts(self.path, self.result)
        except BaseException as exc:
            self.failed = exc
            if writer is not None:
                writer.close()
            if self.journal is not None:
                self.journal.close()
            self.note = self._left_behind()
            raise

    def _journal(self) -> tuple[Iterable[Any], Sink | None, int | None,
                                tuple[int, int] | None, int]:
        """Open the journal (if any): the items to run, the sink, the dead letters to keep,
        where in the output to write on from (a resumed or appended run), and where this
        run's outputs begin in it."""
        source, sink = self.source, self.sink
        if self.limit is not None:
            source = itertools.islice(source, self.limit)
        appended = self._appended_at()
        keep = self._dead_letters() if appended is not None else None
        resume_at = (appended, 0) if appended is not None else None
        if self.directory is None:
            return source, sink, keep, resume_at, 0
        reader = self.source if isinstance(self.source, InputReader) else None
        header = _header(self, appended)
        if self.resume and self.directory.is_dir() and not began(self.directory):
            shutil.rmtree(self.directory)  # stopped before its journal began: run it afresh
            self.resume = False
        self.journal = (Journal.resume(self.directory, header, reader) if self.resume
                        else Journal.start(self.directory, header, reader))
        if not self.resume:
            return source, sink, keep, resume_at, 0
        state = self.journal.state
        if isinstance(self.source, Source):
            shards = list(state.done.remaining(self.source.shards))
            source = replace(self.source, shards=shards, count=len(shards))
            if sink is not None:
                sink = replace(sink, kept=tuple((name, tuple(ranges))
                                                for name, ranges in state.parts.items()))
        else:
            source = state.done.remaining(source)
        first = int(state.header.get("appended_at", 0))
        at = state.output_at if state.checkpoints else first
        return source, sink, self._dead_letters(), (at, state.outputs), first

    def _appended_at(self) -> int | None:
        """With ``append`` (not resuming): the bytes the output holds, written after."""
        if not self.append or self.resume or not self.path.is_file():
            return None
        return self.path.stat().st_size or None

    def _dead_letters(self) -> int | None:
        """The bytes of the dead-letter file a resumed or appended run keeps."""
        path = self.launch.options.dead_letter
        if path is None:
            return None
        return path.stat().st_size if path.exists() else 0

    def batches(self) -> Generator[list[Any], None, None]:
        """Start; write each turn's outputs (or count the parts' ones), checkpoint, and
        yield them; at the end, the last checkpoint and the journal gone."""
        self.start()
        assert self.result is not None and self.into is not None
        result, into, journal = self.result, self.into, self.journal
        checkpoints = Checkpoints(journal, result, into.durable) if journal else None
        ended = False
        try:
            with result:
                for batch in result.turns():  # an empty one: a moment to checkpoint
                    for value in batch:
                        into.take(value)
                        if checkpoints is not None:
                            checkpoints.written(into.made)
                    if not batch and checkpoints is not None:
                        checkpoints.written(into.made)
                    yield batch
                if journal is not None and checkpoints is not None:
                    into.finish(journal, checkpoints)
                    self.journal = None
                ended = True
        finally:
            self._settle(ended)

    def _settle(self, ended: bool) -> None:
        """The run ended or stopped: its record with the digest, the journal closed (kept
        if the run did not end), the output closed, and what a stopped run left behind."""
        assert self.result is not None and self.into is not None
        try:
            record = self.result.record
            self.recorded = record.model_copy(
                update={"output_digest": self.into.digested(record.run_id)})
        finally:
            if self.journal is not None:
                self.journal.close()
            self.into.close()
            if not ended:
                self.note = self._left_behind()

    def _left_behind(self) -> str:
        """After the run stopped: when it did no item, remove its journal (and the output
        it created and wrote nothing to), so that it can run again; say what was left."""
        journal = self.journal
        written = self.into.count if self.into is not None else 0
        if journal is not None and (journal.state.done.count or journal.state.outputs
                                    or written):
            return "; --resume continues the run"
        if written:
            return ""
        removed = []
        if journal is not None and journal.directory.exists():
            journal.finish()
            self.journal = None
            removed.append(f"its journal {journal.directory}")
        if not self.existed and self.sink is None and self.stream is None \
                and self.path.is_file():
            self.path.unlink(missing_ok=True)
            shutil.rmtree(self.path.with_name(self.path.name + ".parts"), ignore_errors=True)
            removed.append(f"the empty {self.path}")
        if not removed:
            return ""
        return (f"; no item was done, so {' and '.join(removed)} "
                f"{'were' if len(removed) > 1 else 'was'} removed: the same command can run "
                "again")

    def record(self) -> RunRecord:
        """The record with the output digest (the start's own error where it failed)."""
        if self.recorded is None and self.failed is not None:
            raise self.failed
        if self.recorded is None:
            raise UnitDefinitionError(f"the run into {self.path} did not start{self.note}")
        return self.recorded

    def close(self) -> None:
        """A run started and never iterated: stop it (the journal stays, for a resume)."""
        if self.result is not None and self.recorded is None:
            self.result.close()
            self._settle(False)

    def worker_pids(self, unit: str | None = None) -> list[int]:
        return self.result.worker_pids(unit) if self.result is not None else []

    def resize(self, unit: str, replicas: int) -> None:
        if self.result is None:
            raise TypeError("the run has not started: iterate it or enter it first")
        self.result.resize(unit, replicas)

    def settled_spans(self, consumed: int) -> list[tuple[int, int]] | None:
        raise TypeError("a run into an output takes its own checkpoints")


class Run(RunResult):
    """A run into an output, journaled when given a journal (`fitwork.run` with
    ``output=``).  It starts when first used: iterated, entered, or asked for its record,
    so a caller holds it before anything can fail (`note` says what was left).  Iterating
    yields each output once it is written (a directory's: the counts committed); the
    record carries the digest of the whole output (a resumed run's kept outputs too).
    """

    def __init__(self, launch: Launch, pipeline: Pipeline, source: Iterable[Any],
                 output: str | Path | Sink | IO[bytes] | None, *, journal: Path | None = None,
                 resume: bool = False, append: bool = False, limit: int | None = None
                 ) -> None:
        if output is None:
            raise UnitDefinitionError("journal=, resume= and append= are about a run's "
                                      "output: give output= (a file, or a directory)")
        self.output = _Output(launch, pipeline, source, output, journal, resume, append, limit)
        _check(self.output)
        super().__init__(self.output)

    @property
    def note(self) -> str:
        """After a run that stopped: what it left behind ("; --resume continues the run",
        or what it removed because it had done no item)."""
        return self.output.note

    @property
    def recorded(self) -> RunRecord | None:
        """The record, with the output digest, once the run ended or stopped."""
        return self.output.recorded

    @property
    def written(self) -> int:
        """Outputs the output holds (a file's earlier ones included)."""
        return self.output.into.count if self.output.into is not None else 0

    def start(self) -> Run:
        """Open the journal and the output, and start the engine (once)."""
        self.output.start()
        return self

    def __enter__(self) -> Run:
        return self.start()

    def wait(self) -> RunRecord:
        """Run to the end, writing every output (an error stops it and is raised); the
        record."""
        for _ in self._batches:
            pass
        return self.record


def _check(run: _Output) -> None:
    """Refuse what a run into this output cannot do, in one line naming the fix."""
    if run.resume and run.directory is None:
        raise UnitDefinitionError("resume=True continues a journaled run: give its journal=")
    if run.stream is not None and (run.directory is not None or run.append):
        raise UnitDefinitionError("output= a stream (stdout) has no place a journal can "
                                  "resume from, nor earlier lines to append after: drop "
                                  "journal=/resume=/append=, or write to a file")
    if run.sink is not None:
        if run.append:
            raise UnitDefinitionError(f"append=True adds lines to a JSON Lines file; "
                                      f"{run.path} is a directory: write to a new path instead")
        if run.limit is not None:
            raise UnitDefinitionError(f"limit= with output {run.path}: a quick look reads "
                                      "through the driver; write to a file (out.jsonl)")
    run.launch.refuse_order(run.sink)
    named = isinstance(run.source, Source) or (
        isinstance(run.source, InputReader) and run.source.path is not None)
    if run.directory is not None and not named:
        raise UnitDefinitionError(
            "journal= needs an input it can identify on resume: a path, what "
            "fitwork.io.inputs.read_items returns, or a fitwork.Source")


def _header(run: _Output, appended: int | None) -> dict[str, Any]:
    """The journal's header: the pipeline, the input (what identifies it), the output."""
    units = [u.name for u in run.pipeline.units]
    extra: dict[str, Any] = {"appended_at": appended} if appended else {}
    if isinstance(run.source, Source):
        described = run.source.describe
        if not (Path(described).exists() or is_glob(described)):  # shards of your own
            return {"journal": JOURNAL_VERSION, "pipeline": run.pipeline.name,
                    "input": described, "output": str(run.path.resolve()), "units": units,
                    "sharded": True}
        return identity(run.pipeline.name, Path(described), run.path, units=units,
                        sharded=True)
    assert isinstance(run.source, InputReader) and run.source.path is not None
    return identity(run.pipeline.name, Path(run.source.path), run.path, units=units, **extra)
