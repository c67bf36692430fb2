"""What `fitwork run` checks and says around a run: paths it writes that it reads, what an
existing output and an unfinished journal mean for this run, and the summary at the end."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import IO, Any, NoReturn

import click
from rich.console import Console

from fitwork.commands.common import fail
from fitwork.commands.decompose import AUTO
from fitwork.commands.options import conflicting_paths, holds_outputs

STDOUT = "-"
"""``--output -``: JSON Lines to stdout."""


def claim_stdout() -> IO[bytes]:
    """Stdout for the outputs alone: a private copy of it is returned, and file descriptor
    1 then points at stderr, so that anything else written to stdout (a summary, a unit's
    print in this process or a worker started after) lands on stderr."""
    sys.stdout.flush()
    outputs = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return outputs


def stdout_closed(stream: IO[bytes] | None, job: Any) -> NoReturn:
    """The reader of ``--output -`` closed it (``| head``): the run stopped; one line."""
    if stream is not None:  # nothing more can reach it; let exit's flush not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    fail(f"stdout was closed by its reader: the run stopped after "
         f"{job.written if job else 0:,} outputs", code=141)


def refuse_overwriting_inputs(reference: str, input_path: Path, plan_path: Path | None,
                               decompose: str | None, output: Path, record: Path | None,
                               dead_letter: Path, journal: Path | None) -> None:
    """One line and exit 2 when a path the run writes is one it reads."""
    target = reference.rpartition(":")[0]
    reads = {"--input": input_path, "--plan": plan_path,
             "--decompose file": Path(decompose) if decompose not in (None, AUTO) else None,
             "pipeline file": Path(target) if target.endswith(".py") else None}
    writes = {"--output": output, "--record": record, "--dead-letter": dead_letter,
              "--journal": journal}
    clash = conflicting_paths(writes, reads)
    if clash:
        fail(clash, code=2)


def prepare_output(output: Path, directory: bool, mode: str | None, resume: bool,
                    journal: Path | None, errors: Console) -> int | None:
    """Check ``--mode`` against what the output holds; the byte size an append writes after.

    A journal left by a run that did no item is removed (with a note): it would only block
    this run.  ``--mode overwrite`` also drops an unfinished run's journal: it starts over.
    """
    from fitwork.io.journal import JOURNAL_FILE

    if resume:
        if mode is not None:
            fail(f"--resume continues the interrupted run into {output}; drop --mode {mode}",
                 code=2)
        return None
    chosen = mode or "error"
    if chosen == "append" and (directory or output.suffix.lower() == ".parquet"):
        fail(f"--mode append adds lines to a JSON Lines file; {output} is "
             f"{'a directory' if directory else 'Parquet'}: write to a new path instead",
             code=2)
    unfinished = journal is not None and (journal / JOURNAL_FILE).exists()
    if unfinished and journal is not None:
        if did_nothing(journal, output, directory):
            shutil.rmtree(journal, ignore_errors=True)
            errors.print(f"note: removed journal {journal}: the run that left it did no item",
                         markup=False, highlight=False, soft_wrap=True)
            unfinished = False
        elif chosen == "overwrite":
            shutil.rmtree(journal, ignore_errors=True)
            errors.print(f"note: removed journal {journal} of an unfinished run: --mode "
                         "overwrite starts over", markup=False, highlight=False, soft_wrap=True)
            unfinished = False
    if not holds_outputs(output, directory):
        return None
    if chosen == "error":
        resume_hint = "--resume to continue the interrupted run, " if unfinished else ""
        fail(f"output {output} already holds outputs; pass {resume_hint}--mode overwrite to "
             "replace them, or --mode append to add to them (JSON Lines)")
    return output.stat().st_size if chosen == "append" else None


def did_nothing(journal: Path, output: Path, directory: bool) -> bool:
    """Whether the journal's run recorded no item done and left no output past its start."""
    from fitwork.io.journal import JournalError, load

    try:
        state = load(journal)
    except JournalError:
        return not holds_outputs(output, directory)  # empty or torn: nothing to resume
    if state.checkpoints or state.done.count:
        return False
    start = int(state.header.get("appended_at", 0))
    return not holds_outputs(output, directory) or (
        output.is_file() and output.stat().st_size == start)


def say_decomposed(errors: Console, pipeline: Any, input_text: str) -> None:
    """One line on stderr: how ``--decompose`` split the function on the input's items."""
    made = getattr(pipeline, "decomposition", None)
    if made is None:
        return
    units = " -> ".join(f"{u.name} ({u.kind or 'cpu'})" for u in made.units)
    errors.print(f"decomposed {made.function} on {made.samples} items of {input_text}: "
                 f"{units}", markup=False, highlight=False, soft_wrap=True)


SPEED_NOISE = 0.10
"""How far two readings of the probe on a steady host fall apart: 0.90-1.02 over eight
runs in one process on this repository's 2-core host."""


def speed_line(profiled: float) -> str:
    """The host's speed now (a fixed CPU probe, read after the run) against when its plan's
    profile was taken: what part of a miss is the host's moment, not the plan's."""
    from fitwork.telemetry.host_speed import host_speed

    ratio = host_speed() / profiled
    said = (f"host speed now {ratio:.2f}x what it was when the pipeline was profiled (a "
            "fixed CPU probe)")
    if abs(ratio - 1) <= SPEED_NOISE:
        return f"{said}: the same, within the probe's own noise (±{SPEED_NOISE:.0%})"
    return (f"{said}: CPU-bound work runs about that much "
            + ("faster" if ratio > 1 else "slower") + " than the plan assumed")


def summarise(record: Any, planned: Any, monolithic: bool, record_path: Path | None,
               max_failures: int | None, wrote: str, adapted: bool = False) -> None:
    """The end of a run on stdout: the summary, the plan's prediction against what the run
    did, what ``--adapt`` re-fitted (``adapted``), where things went, and the failures
    (exit 1 unless they were allowed)."""
    from fitwork.report.realized import compare
    from fitwork.report.terminal import stdout_console, summary

    console = stdout_console()
    console.print(summary(record))
    if planned is not None:
        which = "monolithic" if monolithic else "fitted"
        side = planned.monolithic if monolithic else planned.fitted
        predicted, steady, priced = side.throughput, side.throughput, ""
        if record.engine == "ray":  # Ray's start-up and calls (fitwork.engine.ray.costs)
            from fitwork.engine.ray.costs import for_record, steady_rate

            predicted, priced = for_record(predicted, record)
            steady = steady_rate(side.throughput, len(record.units))
        elif record.items_completed > 0:  # its replicas' builds, the first item's way
            predicted = planned.run_rate(record.items_completed, which)
            startup, first = planned.run_overhead(which)
            priced = (f" over a run of {record.items_completed:,} items ({steady:,.1f} "
                      f"steady, less its replicas building their units, {startup:.2f} s, "
                      f"and the first item's way through, {first:.2f} s)")
        console.print(f"plan predicted {predicted:,.1f} items/s for the {side.label} side"
                      f"{priced}; {compare(record, predicted, steady)}", markup=False,
                      soft_wrap=True)
        if planned.profiled_speed:
            console.print(speed_line(planned.profiled_speed), markup=False, soft_wrap=True)
    if adapted:
        for line in refit_lines(record.refits, record.wall_s):
            console.print(line, markup=False, soft_wrap=True)
    console.print(wrote + (f", run record to {record_path}" if record_path else ""),
                  markup=False, soft_wrap=True)
    if record.output_digest:
        console.print(f"output digest {record.output_digest} (the same outputs, in any "
                      "order, give the same digest)", markup=False, soft_wrap=True)
    if not record.failures:
        return
    common = common_errors(record)
    console.print(f"{record.failures} items failed: {common}", markup=False, soft_wrap=True)
    console.print(f"{record.failures} failed items in {record.dead_letter} (this run: "
                  f"{record.run_id})", markup=False, soft_wrap=True)
    if max_failures is None:
        fail(f"{record.failures} items failed; dead letters in {record.dead_letter}; the "
             f"most common: {common.split('; ')[0]}; pass --max-failures N to accept up to "
             "N failed items")


MOST_COMMON = 3
"""How many kinds of error a failed run names (each with its count)."""


def common_errors(record: Any, most: int = MOST_COMMON) -> str:
    """The run's most common errors, each ``N x Type: message (unit U)``, from its dead
    letters (this run's lines), else from the failures its record keeps."""
    from collections import Counter

    counts: Counter[tuple[str, str]] = Counter()
    try:
        with open(record.dead_letter, "rb") as letters:
            for line in letters:
                letter = json.loads(line)
                if letter.get("run_id") == record.run_id:
                    counts[_first_line(letter.get("error", "")), letter.get("unit", "?")] += 1
    except (OSError, TypeError, ValueError):
        counts = Counter((_first_line(f.error), f.unit) for f in record.failed_items)
    said = [f"{n:,} x {error} (unit {unit})" for (error, unit), n in counts.most_common(most)]
    others = len(counts) - len(said)
    if others > 0:
        said.append(f"and {others} other kind{'s' if others > 1 else ''} of error")
    return "; ".join(said) or "no error recorded"


def _first_line(error: str, width: int = 160) -> str:
    """An error's first line, cut to ``width`` characters."""
    line = error.strip().splitlines()[0] if error.strip() else "unknown error"
    return line if len(line) <= width else line[:width - 3] + "..."


def refit_lines(refits: Any, wall_s: float | None = None) -> list[str]:
    """What ``--adapt`` did: how many re-solves, how many changed the layout, and each one
    (its time, the replicas before and after, and why); a run of ``wall_s`` seconds too short
    for the adapter to judge is said to be."""
    from fitwork.engine.adapt import AdaptPolicy

    window = AdaptPolicy().window
    if not refits and wall_s is not None and wall_s < 2 * window:
        return [f"--adapt: no re-fit: the run took {wall_s:.1f} s, and a re-fit needs a unit "
                f"off the plan's range for a whole {window:g} s window after a first one"]
    if not refits:
        return ["--adapt: no re-fit: no unit ran off the plan's range for a whole window"]
    applied = sum(r.after != r.before for r in refits)
    lines = [f"--adapt: {len(refits)} re-fit{'s' if len(refits) != 1 else ''}, "
             f"{applied} changed the layout"]
    for r in refits:
        change = (f"{_counts(r.before)} -> {_counts(r.after)} (predicted "
                  f"{r.predicted_before:,.1f} -> {r.predicted_after:,.1f} items/s)"
                  if r.after != r.before else _counts(r.before))
        lines.append(f"  at {r.t_s:.1f} s: {change}: {r.reason}")
    return lines


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} x{n}" for name, n in counts.items())


def journal_dir(given: Path | None, off: bool, resume: bool, output: Path) -> Path | None:
    """Where the run's journal goes: as given, or beside the output by default."""
    if off:
        if given is not None or resume:
            raise click.UsageError("--no-journal cannot go with --journal or --resume")
        return None
    return given if given is not None else output.with_name(output.name + ".journal")
