"""The `fitwork` command: parses arguments, calls the library, renders; nothing more."""

from __future__ import annotations

import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

from fitwork.cli_options import (
    UnitSettings,
    conflicting_paths,
    csv_strings_option,
    holds_outputs,
    output_mode_option,
    unit_options,
)
from fitwork.decomposition.cli import (
    AUTO,
    decompose_command,
    decompose_option,
    load_pipeline_for,
    resolve_reference,
    sample_items,
)
from fitwork.engine.registry import ENGINES
from fitwork.errors import FitworkError
from fitwork.orchestrate.cli import deploy, fleet_k8s, fleet_slurm
from fitwork.report.cli_report import report
from fitwork.report.metrics import combine_progress, exporter_for, metrics_options
from fitwork.version import __version__
from fitwork_demo.cli import demo


def _parse_workers(values: tuple[str, ...]) -> dict[str, int]:
    workers: dict[str, int] = {}
    for value in values:
        name, sep, count = value.partition("=")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise click.BadParameter(f"{value!r}: write UNIT=N with N >= 1, e.g. decode=2",
                                     param_hint="--workers")
        workers[name] = int(count)
    return workers


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fitwork")
def main() -> None:
    """fitwork: break a workload into units, fit them to the hardware, run, and measure."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an exception so outputs close validly and the record is written."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


@main.command()
@click.argument("pipeline_ref", metavar="MODULE_OR_FILE:PIPELINE", required=False)
@click.option("--input", "input_text", required=True, type=click.Path(),
              help="JSON Lines, CSV, Parquet, or a directory (one item per file); with a "
                   "directory --output, files, globs or a directory of data files, read by "
                   "the replicas.")
@click.option("--output", "output_text", required=True, type=click.Path(),
              help="Where outputs go: JSON Lines, or Parquet by the .parquet suffix; a "
                   "directory (DIR/) has the last unit's replicas write parts into it.")
@click.option("--workers", "-w", multiple=True, metavar="UNIT=N",
              help="Replicas of a unit; repeat for several units.")
@click.option("--ordered", is_flag=True, help="Write outputs in input order.")
@click.option("--dead-letter", type=click.Path(path_type=Path),
              help="JSONL file for this run's failed items [default: "
                   "OUTPUT.dead-letters.jsonl]; replaced at each run (added to with "
                   "--mode append).")
@click.option("--record", "record_path", type=click.Path(path_type=Path),
              help="Write the run record (JSON) here, also when the run is interrupted.")
@click.option("--max-failures", type=click.IntRange(min=0), default=None,
              help="Allow up to N failed items (exit 0), and stop the run past N. Without it "
                   "the run goes on and exits 1 if any item failed.")
@click.option("--plan", "plan_path", type=click.Path(path_type=Path),
              help="Run with the placement a `fitwork plan` gave (--workers still override).")
@click.option("--node-type", help="Run only the plan's share on this node type (local runs "
              "of a multi-node plan).")
@click.option("--adapt", is_flag=True, help="With --plan: compare each unit's live rate with "
              "the plan's and re-fit replica counts while the run goes on.")
@click.option("--monolithic", is_flag=True,
              help="Run the pipeline fused into one unit (named 'monolithic'; with --plan, "
                   "the plan's monolithic baseline): the baseline to compare with.")
@click.option("--engine", type=click.Choice(sorted(ENGINES)), default="local",
              show_default=True, help="Processes on this host, actors on a Ray cluster, or a "
              "simulation on the plan's rates.")
@click.option("--ray-address", help="The Ray cluster to join [default: RAY_ADDRESS, or a "
              "new one on this host].")
@click.option("--ray-tasks", is_flag=True,
              help="With --engine ray: run a pipeline of one stateless unit (a plan that "
                   "fused every stage) as Ray tasks on Ray's warm workers, not actors.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N",
              help="Run only the first N input items (a quick look).")
@click.option("--journal", "journal_path", type=click.Path(path_type=Path),
              help="Journal the run here, so --resume can continue it after a crash "
                   "[default: OUTPUT.journal].")
@click.option("--no-journal", is_flag=True, help="Do not journal the run.")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted run from its journal: only the items it had not "
                   "finished run, and the output keeps every result once.")
@click.option("--bad-input", type=click.Choice(["error", "dead-letter"]), default="error",
              show_default=True,
              help="A line or row the reader cannot read (bad JSON, a bad CSV row, a Parquet "
                   "row group that fails): stop with the error, or send it to the dead "
                   "letters with its file and position, count it as a failed item, and go on.")
@csv_strings_option
@metrics_options
@decompose_option
@output_mode_option
@unit_options
def run(pipeline_ref: str | None, input_text: str, output_text: str,
        workers: tuple[str, ...], ordered: bool, dead_letter: Path | None,
        record_path: Path | None, max_failures: int | None, plan_path: Path | None,
        node_type: str | None, adapt: bool, monolithic: bool, engine: str,
        ray_address: str | None, ray_tasks: bool,
        quiet: bool, limit: int | None, journal_path: Path | None, no_journal: bool,
        resume: bool, metrics_port: int | None, metrics_host: str,
        decompose: str | None, csv_strings: bool = False, mode: str | None = None,
        cpus: tuple[str, ...] = (), batch: tuple[str, ...] = (),
        io: tuple[str, ...] = (), bad_input: str = "error") -> None:
    """Run a pipeline over an input file, on this host or on a Ray cluster."""
    import itertools

    input_path, output_path = Path(input_text), Path(output_text)

    from fitwork.io import OutputDigest, count_items, open_writer, read_items
    from fitwork.journal import Checkpoints, Journal, identity
    from fitwork.report.terminal import ProgressView
    from fitwork.runner import run as run_pipeline

    errors = Console(stderr=True)
    replicas = _parse_workers(workers)
    settings = UnitSettings.parse(cpus, batch, io)
    if ray_tasks and engine != "ray":
        raise click.UsageError("--ray-tasks runs on Ray: add --engine ray")
    if settings and adapt:
        raise click.UsageError("--cpus/--batch/--io with --adapt: a re-fit would change "
                               "them again; drop --adapt or the per-unit flags")
    pipeline_ref, decompose = resolve_reference(pipeline_ref, decompose)
    sharded = _names_directory(output_text)
    dead_letter = dead_letter or (output_path / "_dead-letters.jsonl" if sharded else
                                  output_path.with_name(output_path.name + ".dead-letters.jsonl"))
    where = _journal_dir(journal_path, no_journal, resume, output_path)
    _refuse_overwriting_inputs(pipeline_ref, input_path, plan_path, decompose, output_path,
                               record_path, dead_letter, where)
    existed = output_path.exists()
    appended_at = _prepare_output(output_path, sharded, mode, resume, where, errors)
    options: dict[str, Any] = {}
    if engine == "ray":
        options = ({"address": ray_address} if ray_address else {}) | (
            {"task_replicas": True} if ray_tasks else {})
    planned = None
    record = None
    journal: Journal | None = None
    writer: Any = None
    held: dict[str, Any] = {}  # a sharded run's journal and committed count, for a failure
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        sample = None
        if decompose == AUTO and plan_path is None:  # a plan names the units by source alone
            def sample() -> Any:
                return sample_items(input_text, csv_types=not csv_strings,
                                    rows=sharded)
        pipeline = load_pipeline_for(pipeline_ref, decompose, sample=sample)
        if sample is not None:
            _say_decomposed(errors, pipeline, input_text)
        placement: Any = None
        if adapt and not plan_path:
            raise click.UsageError("--adapt re-fits a plan while the run goes on: give "
                                   "--plan FILE")
        if plan_path:
            from fitwork.fit.plan import Plan

            planned = Plan.load(plan_path)
            if adapt and planned.fused and not monolithic:
                errors.print(f"--adapt: plan {plan_path} runs the units fused (one unit), so "
                             "there is nothing to re-balance and the run is not adapted; "
                             "plan with --no-fuse to adapt the split layout", soft_wrap=True)
            side = "monolithic" if monolithic else "fitted"
            placement = planned if adapt and not monolithic and node_type is None \
                else planned.placement(node_type, side=side)
        if monolithic and placement is None:
            from fitwork.fit.monolithic import FUSED

            pipeline = pipeline.fused(name=FUSED)
        if settings:
            pipeline = settings.apply(pipeline, also=placement.units if placement else ())
            if placement is not None:
                placement = settings.placed(placement)
        if planned is not None:
            for line in batch_changes(planned, pipeline, side="monolithic" if monolithic
                                      else "fitted", settings=settings):
                errors.print(line, markup=False, highlight=False, soft_wrap=True)
        if sharded:
            record, written = _run_sharded(
                pipeline, input_text, output_path, engine=engine, placement=placement,
                workers=replicas, dead_letter=dead_letter, max_failures=max_failures,
                quiet=quiet, limit=limit,
                journal_dir=where,
                resume=resume, csv_types=not csv_strings, adapt=adapt and not monolithic,
                record_path=record_path, options=options,
                metrics=(metrics_port, metrics_host), held=held, bad_input=bad_input)
            _summarise(record, planned, monolithic, record_path, max_failures,
                       f"wrote {written:,} outputs in parts to {output_path}/")
            return
        items = reader = read_items(input_path, csv_types=not csv_strings, bad_input=bad_input)
        if limit is not None:
            items = itertools.islice(items, limit)
        resume_at = keep = None
        if appended_at is not None:  # --mode append: after what the output holds
            resume_at = (appended_at, 0)
            keep = dead_letter.stat().st_size if dead_letter.exists() else 0
        if where is not None:
            header = identity(pipeline.name, input_path, output_path,
                              units=[u.name for u in pipeline.units],
                              **({"appended_at": appended_at} if appended_at else {}))
            journal = (Journal.resume(where, header, reader) if resume
                       else Journal.start(where, header, reader))
            if resume:
                items = journal.state.done.remaining(items)
                state = journal.state
                at = state.output_at if state.checkpoints else \
                    int(state.header.get("appended_at", 0))
                resume_at = (at, state.outputs)
                keep = dead_letter.stat().st_size if dead_letter.exists() else 0
        total = None if quiet else count_items(input_path)
        if limit is not None and total is not None:
            total = min(total, limit)
        if total is not None and journal is not None:
            total = max(0, total - journal.state.done.count)
        view = ProgressView(errors, total, pipeline.name)
        with (open_writer(output_path, resume_at, journaled=journal is not None) as writer,
              view if not quiet else _Null() as live,
              exporter_for(metrics_port, metrics_host) as exporter):
            if exporter is not None:
                errors.print(f"serving metrics on {exporter.url}", markup=False)
            result = run_pipeline(
                pipeline, items, engine=engine, placement=placement, workers=replicas,
                ordered=ordered, dead_letter=dead_letter, max_failures=max_failures,
                progress=combine_progress(live, exporter), adapt=adapt and not monolithic,
                spans=journal is not None, dead_letter_keep=keep, **options)
            digest = OutputDigest()
            checkpoints = Checkpoints(journal, result, writer) if journal else None
            try:
                with result:
                    for consumed, output in enumerate(result, 1):
                        writer.write(output)
                        digest.add(output)
                        if checkpoints is not None:
                            checkpoints.written(consumed)
                    if journal is not None and checkpoints is not None:
                        checkpoints.end(digest.count)
                        writer.close()  # whole, before the journal that could redo it goes
                        journal.finish()
                        journal = None
                        writer.cleanup()
            finally:
                if journal is not None:
                    journal.close()
                record = result.record.model_copy(
                    update={"output_digest": digest.hexdigest()})
                if record_path:
                    record.save(record_path)
    except KeyboardInterrupt as stop:
        what = "terminated" if isinstance(stop, Terminated) else "interrupted"
        saved = f"; run record in {record_path}" if record_path and record else ""
        left = _left_behind(journal or held.get("journal"),
                            writer.count if writer is not None else held.get("committed", 0),
                            output_path, existed, sharded)
        where_to = "" if left.startswith("; no item") else \
            f"; outputs so far are in {output_path}"
        _fail(f"{what}: workers stopped{where_to}{saved}{left}",
              code=143 if isinstance(stop, Terminated) else 130)
    except FitworkError as exc:
        saved = f" (run record in {record_path})" if record_path and record else ""
        left = _left_behind(journal or held.get("journal"),
                            writer.count if writer is not None else held.get("committed", 0),
                            output_path, existed, sharded)
        _fail(f"{exc}{saved}{left}")
    assert record is not None
    _summarise(record, planned, monolithic, record_path, max_failures,
               f"wrote {writer.count:,} outputs to {output_path}")


def _refuse_overwriting_inputs(reference: str, input_path: Path, plan_path: Path | None,
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
        _fail(clash, code=2)


def _prepare_output(output: Path, directory: bool, mode: str | None, resume: bool,
                    journal: Path | None, errors: Console) -> int | None:
    """Check ``--mode`` against what the output holds; the byte size an append writes after.

    A journal left by a run that did no item is removed (with a note): it would only block
    this run.  ``--mode overwrite`` also drops an unfinished run's journal: it starts over.
    """
    from fitwork.journal import JOURNAL_FILE

    if resume:
        if mode is not None:
            _fail(f"--resume continues the interrupted run into {output}; drop --mode {mode}",
                  code=2)
        return None
    chosen = mode or "error"
    if chosen == "append" and (directory or output.suffix.lower() == ".parquet"):
        _fail(f"--mode append adds lines to a JSON Lines file; {output} is "
              f"{'a directory' if directory else 'Parquet'}: write to a new path instead",
              code=2)
    unfinished = journal is not None and (journal / JOURNAL_FILE).exists()
    if unfinished and journal is not None:
        if _did_nothing(journal, output, directory):
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
        _fail(f"output {output} already holds outputs; pass {resume_hint}--mode overwrite to "
              "replace them, or --mode append to add to them (JSON Lines)")
    return output.stat().st_size if chosen == "append" else None


def _did_nothing(journal: Path, output: Path, directory: bool) -> bool:
    """Whether the journal's run recorded no item done and left no output past its start."""
    from fitwork.journal import JournalError, load

    try:
        state = load(journal)
    except JournalError:
        return not holds_outputs(output, directory)  # empty or torn: nothing to resume
    if state.checkpoints or state.done.count:
        return False
    start = int(state.header.get("appended_at", 0))
    return not holds_outputs(output, directory) or (
        output.is_file() and output.stat().st_size == start)


def _left_behind(journal: Any, written: int, output: Path, existed: bool,
                 directory: bool) -> str:
    """After a run stopped: when it did no item, remove its journal (and the output it
    created and wrote nothing to), so the same command runs again; say what was left."""
    if journal is not None and (journal.state.done.count or journal.state.outputs or written):
        return "; --resume continues the run"
    if written:
        return ""
    removed = []
    if journal is not None and journal.directory.exists():
        journal.finish()
        removed.append(f"its journal {journal.directory}")
    if not existed and not directory and output.is_file():
        output.unlink(missing_ok=True)
        shutil.rmtree(output.with_name(output.name + ".parts"), ignore_errors=True)
        removed.append(f"the empty {output}")
    if not removed:
        return ""
    return (f"; no item was done, so {' and '.join(removed)} "
            f"{'were' if len(removed) > 1 else 'was'} removed: the same command can run again")


def _say_decomposed(errors: Console, pipeline: Any, input_text: str) -> None:
    """One line on stderr: how ``--decompose`` split the function on the input's items."""
    made = getattr(pipeline, "decomposition", None)
    if made is None:
        return
    units = " -> ".join(f"{u.name} ({u.kind or 'cpu'})" for u in made.units)
    errors.print(f"decomposed {made.function} on {made.samples} items of {input_text}: "
                 f"{units}", markup=False, highlight=False, soft_wrap=True)


def batch_changes(plan: Any, pipeline: Any, side: str = "fitted",
                  settings: UnitSettings | None = None) -> list[str]:
    """A line for each unit whose planned batch size differs from its declared one, with why
    the fit chose it (from the rates it had at both sizes)."""
    chosen = plan.fitted if side == "fitted" else plan.monolithic
    if plan.fused or side != "fitted":
        return []
    rates = [*plan.rates, *plan.batch_rates]
    lines = []
    for p in chosen.result.replicas:
        if not p.replicas or not p.batch_size:
            continue
        try:
            declared = pipeline.unit_named(p.unit).batch_size
        except FitworkError:
            continue
        if settings is not None and p.unit in settings.batch:
            continue  # the flag set it; nothing of the plan's to explain
        if not declared or declared == p.batch_size:
            continue
        at = {r.batch_size: r for r in rates if r.unit == p.unit
              and r.device_class == p.device_class and r.rate > 0}
        swept = {r.batch_size for r in plan.batch_rates if r.unit == p.unit
                 and r.device_class == p.device_class}
        lines.append(f"plan: unit {p.unit!r} runs batch_size={p.batch_size}, not the declared "
                     f"{declared}: {_why_batch(at, swept, p.batch_size, declared, plan)} "
                     f"(--batch {p.unit}={declared} keeps the declared size)")
    return lines


def _why_batch(at: dict[int | None, Any], swept: set[int | None], planned: int,
               declared: int, plan: Any) -> str:
    """Why the fit ran ``planned`` where the unit declared ``declared``."""
    mine, theirs = at.get(planned), at.get(declared)
    if swept and declared not in swept:
        sizes = sorted(size for size in swept if size)
        largest = sizes[-1] if sizes else None
        carried = (f"its rate at {declared} is the one at {largest} carried over, so the fit "
                   "weighed them alike and took the smaller batch (less latency per call)"
                   if theirs is not None and mine is not None and planned == largest
                   else f"{declared} was not measured")
        return (f"the profile measured batch sizes {', '.join(map(str, sizes))} only (a "
                f"batch holds at most the sample items): {carried}; profile with --samples "
                f"{declared} or more to measure it")
    if theirs is None:
        return f"the profile has no rate at {declared}"
    limit = plan.max_latency
    if limit is not None and theirs.batch_latency_s is not None \
            and theirs.batch_latency_s > limit:
        return (f"a batch of {declared} takes {theirs.batch_latency_s:.3f} s, over "
                f"--max-latency {limit:g} s")
    if mine is None:
        return "the fit chose it"
    if mine.rate >= theirs.rate:
        return (f"one replica does {mine.rate:,.1f} items/s at {planned} against "
                f"{theirs.rate:,.1f} at {declared} ({mine.method})")
    return (f"one replica does {theirs.rate:,.1f} items/s at {declared} against "
            f"{mine.rate:,.1f} at {planned}, but the plan reaches the same throughput with the "
            "smaller batch (less latency and memory per call)")


def _summarise(record: Any, planned: Any, monolithic: bool, record_path: Path | None,
               max_failures: int | None, wrote: str) -> None:
    """The end of a run on stdout: the summary, the plan's prediction against what the run
    did, where things went, and the failures (exit 1 unless they were allowed)."""
    from fitwork.report.terminal import stdout_console, summary

    console = stdout_console()
    console.print(summary(record))
    if planned is not None:
        side = planned.monolithic if monolithic else planned.fitted
        predicted, priced = side.throughput, ""
        if record.engine == "ray":  # Ray's start-up and calls (fitwork.engine.ray.costs)
            from fitwork.engine.ray.costs import for_record

            predicted, priced = for_record(predicted, record)
        console.print(f"plan predicted {predicted:,.1f} items/s for the {side.label} side"
                      f"{priced}; "
                      f"realized {record.throughput:,.1f} "
                      f"({record.throughput / predicted:.2f}x)", markup=False)
    console.print(wrote + (f", run record to {record_path}" if record_path else ""),
                  markup=False, soft_wrap=True)
    if record.failures:
        console.print(f"{record.failures} failed items in {record.dead_letter} (this run: "
                      f"{record.run_id})", markup=False, soft_wrap=True)
    if record.failures and max_failures is None:
        _fail(f"{record.failures} items failed; dead letters in {record.dead_letter}; pass "
              "--max-failures N to accept up to N failed items")


@main.command()
@click.argument("pipeline_ref", metavar="MODULE_OR_FILE:PIPELINE", required=False)
@click.option("--input", "input_path", required=True, type=click.Path(path_type=Path),
              help="Sample items, in any format `run` reads.")
@click.option("--samples", default=32, show_default=True, type=click.IntRange(min=1),
              help="How many items to measure each unit on.")
@click.option("--output", "-o", "output_path", type=click.Path(path_type=Path),
              default=Path("profile.json"), show_default=True, help="Where the profile goes.")
@click.option("--device-class", "device_classes", multiple=True, metavar="CLASS",
              help="Record the profile as measured on this catalog class instead of the one "
                   "discovered: a CPU class (cpu-x86, cpu-arm) for the host's cores, any other "
                   "class for the GPU that units with a GPU share run on. Repeat for both.")
@decompose_option
@csv_strings_option
def profile(pipeline_ref: str | None, input_path: Path, samples: int, output_path: Path,
            device_classes: tuple[str, ...], decompose: str | None,
            csv_strings: bool = False) -> None:
    """Measure each unit alone on sample items and save a profile."""
    from fitwork.io import read_items
    from fitwork.profiling import profile_pipeline
    from fitwork.profiling.classes import split_classes
    from fitwork.report.terminal import profile_table, stdout_console

    console = stdout_console()
    clash = conflicting_paths({"--output": output_path}, {"--input": input_path})
    if clash:
        _fail(clash, code=2)
    try:
        host_class, accelerator_class = split_classes(device_classes)
        pipeline = load_pipeline_for(*resolve_reference(pipeline_ref, decompose))
        with Console(stderr=True).status("profiling") as status:
            result = profile_pipeline(
                pipeline, read_items(input_path, csv_types=not csv_strings), samples=samples,
                host_class=host_class,
                accelerator_class=accelerator_class,
                progress=lambda name: status.update(f"profiling unit [bold]{name}[/bold]"))
    except FitworkError as exc:
        _fail(exc)
    result.save(output_path)
    console.print(profile_table(result))
    console.print(f"measured on: {result.classes_from}", markup=False)
    console.print(f"wrote profile to {output_path}", markup=False)


@main.command()
@click.argument("pipeline_ref", metavar="MODULE_OR_FILE:PIPELINE", required=False)
@click.option("--profile", "profile_path", required=True, type=click.Path(path_type=Path),
              help="A profile from `fitwork profile` of this pipeline.")
@click.option("--fleet", "fleet_ref", default="local", show_default=True,
              help="A fleet YAML file, or 'local' for this host as discovered.")
@click.option("--objective", type=click.Choice(["max_throughput", "min_cost"]),
              default="max_throughput", show_default=True)
@click.option("--target", type=float, help="Items/s to reach at least cost (min_cost).")
@click.option("--time-limit", type=float, default=10.0, show_default=True,
              help="Seconds the solver may take.")
@click.option("--max-latency", type=float, default=None,
              help="Seconds one call (a whole batch) of any unit may take: batch sizes "
                   "slower than this are not planned.")
@click.option("--no-fuse", is_flag=True, help="Keep the units split even where running them "
              "fused would sustain more.")
@click.option("--output", "-o", "output_path", type=click.Path(path_type=Path),
              default=Path("plan.json"), show_default=True)
@decompose_option
def plan(pipeline_ref: str | None, profile_path: Path, fleet_ref: str, objective: str,
         target: float | None, time_limit: float, max_latency: float | None, no_fuse: bool,
         output_path: Path, decompose: str | None) -> None:
    """Fit the pipeline's units to a fleet; print it beside the monolithic baseline."""
    from fitwork.fit.plan import fit
    from fitwork.hardware.discover import discover_local
    from fitwork.hardware.fleet import Fleet
    from fitwork.profiling import PipelineProfile
    from fitwork.report.terminal import plan_table, stdout_console

    console = stdout_console()
    clash = conflicting_paths({"--output": output_path}, {
        "--profile": profile_path,
        "--fleet file": Path(fleet_ref) if fleet_ref != "local" else None,
        "--decompose file": Path(decompose) if decompose not in (None, AUTO) else None})
    if clash:
        _fail(clash, code=2)
    try:
        pipeline = load_pipeline_for(*resolve_reference(pipeline_ref, decompose))
        profiled = PipelineProfile.load(profile_path)
        profiled.check_matches([u.name for u in pipeline.units], source=str(profile_path))
        fleet_ = discover_local() if fleet_ref == "local" else Fleet.from_yaml(fleet_ref)
        result = fit(profiled, fleet_, objective=objective,  # type: ignore[arg-type]
                     target=target, time_limit=time_limit, max_latency=max_latency,
                     fuse=not no_fuse)
    except FitworkError as exc:
        _fail(exc)
    result.save(output_path)
    console.print(plan_table(result))
    for line in batch_changes(result, pipeline):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote plan to {output_path}", markup=False)


@main.group()
def fleet() -> None:
    """Describe the hardware to fit to."""


_FLEET_OUTPUT = click.option(
    "--output", "-o", "output_path", type=click.Path(path_type=Path),
    help="Also write the fleet as YAML here (for `fitwork plan --fleet`).")


def _show_fleet(discover: Callable[[], Any], output_path: Path | None) -> None:
    """Discover a fleet, print it, and write it as YAML when asked."""
    from fitwork.hardware.render import render_fleet
    from fitwork.report.terminal import stdout_console

    console = stdout_console()
    try:
        found = discover()
    except FitworkError as exc:
        _fail(exc)
    console.print(render_fleet(found))
    if output_path:
        output_path.write_text(found.to_yaml())
        console.print(f"wrote {output_path}", markup=False)


@fleet.command("local")
@_FLEET_OUTPUT
def fleet_local(output_path: Path | None) -> None:
    """This host as the orchestrator granted it: cores, memory, GPUs."""
    from fitwork.hardware.discover import discover_local

    _show_fleet(discover_local, output_path)


@fleet.command("ray")
@click.option("--ray-address", help="The cluster [default: RAY_ADDRESS].")
@_FLEET_OUTPUT
def fleet_ray(ray_address: str | None, output_path: Path | None) -> None:
    """A Ray cluster's live nodes, grouped into node types by label and shape."""
    def discover() -> Any:
        from fitwork.engine.registry import get_engine

        get_engine("ray")  # says which extra to install when Ray is missing
        from fitwork.hardware.ray_fleet import discover_ray

        return discover_ray(ray_address)

    _show_fleet(discover, output_path)


def _names_directory(output: str) -> bool:
    """Whether ``--output`` names a directory: an existing one, or a path ending in ``/``."""
    return output.endswith("/") or Path(output).is_dir()


def _run_sharded(pipeline: Any, input_text: str, output_path: Path, *, engine: str,
                 placement: Any, workers: dict[str, int], dead_letter: Path | None,
                 max_failures: int | None, quiet: bool, limit: int | None,
                 journal_dir: Path | None, resume: bool, csv_types: bool, adapt: bool,
                 record_path: Path | None, options: dict[str, Any],
                 metrics: tuple[int | None, str],
                 held: dict[str, Any] | None = None, bad_input: str = "error"
                 ) -> tuple[Any, int]:
    """A run whose replicas read the input's shards and write the output's parts (``--output
    DIR/``): the driver hands out shards and keeps the books, and touches no item.  Its
    journal records the shards done and, per part, the byte ranges committed."""
    from dataclasses import replace

    from fitwork.engine.parts import Sink
    from fitwork.journal import CHECKPOINT_SECONDS, Journal, identity
    from fitwork.report.terminal import ProgressView
    from fitwork.runner import run as run_pipeline
    from fitwork.shards import Source

    if limit is not None:
        raise click.UsageError(f"--limit with --output {output_path}: a quick look reads "
                               "through the driver; give a file --output (out.jsonl)")
    source = Source.files(input_text, csv_types=csv_types, bad_input=bad_input)
    sink = Sink.files(output_path)
    dead_letter = dead_letter or output_path / "_dead-letters.jsonl"
    journal = keep = None
    if journal_dir is not None:
        header = identity(pipeline.name, Path(input_text), output_path,
                          units=[u.name for u in pipeline.units], sharded=True)
        journal = (Journal.resume(journal_dir, header) if resume
                   else Journal.start(journal_dir, header))
        if held is not None:
            held["journal"] = journal
        if resume:
            shards = list(journal.state.done.remaining(source.shards))
            source = replace(source, shards=shards, count=len(shards))
            sink = replace(sink, kept=tuple((name, tuple(ranges)) for name, ranges
                                            in journal.state.parts.items()))
            keep = dead_letter.stat().st_size if dead_letter.exists() else 0
    errors = Console(stderr=True)
    view = ProgressView(errors, None if quiet else source.count, pipeline.name)
    record = None
    try:
        with (view if not quiet else _Null() as live,
              exporter_for(*metrics) as exporter):
            if exporter is not None:
                errors.print(f"serving metrics on {exporter.url}", markup=False)
            result = run_pipeline(pipeline, source, engine=engine, placement=placement,
                                  workers=workers, dead_letter=dead_letter,
                                  max_failures=max_failures, adapt=adapt, sink=sink,
                                  spans=journal is not None, dead_letter_keep=keep,
                                  progress=combine_progress(live, exporter), **options)
            try:
                committed, due = 0, time.monotonic() + CHECKPOINT_SECONDS
                with result:
                    for count in result:  # the parts hold the outputs; these are counts
                        committed += count
                        if held is not None:
                            held["committed"] = committed
                        if journal is not None and time.monotonic() >= due:
                            _checkpoint(journal, result, committed)
                            due = time.monotonic() + CHECKPOINT_SECONDS
                # the run ended and its parts are sealed: nothing is left to resume
                if journal is not None:
                    journal.finish()
                    journal = None
                    if held is not None:
                        held.pop("journal", None)
            finally:
                record = result.record
                if record_path:
                    record.save(record_path)
    finally:
        if journal is not None:
            journal.close()
    return record, result.record.outputs


def _checkpoint(journal: Any, result: Any, committed: int) -> None:
    """Journal the shards whose outputs are all committed, with the parts' ranges (synced
    to disk first)."""
    spans = result.settled_spans(committed)
    if spans:
        journal.checkpoint(spans, 0, committed, result.sync_parts())


def _journal_dir(given: Path | None, off: bool, resume: bool, output: Path) -> Path | None:
    """Where the run's journal goes: as given, or beside the output by default."""
    if off:
        if given is not None or resume:
            raise click.UsageError("--no-journal cannot go with --journal or --resume")
        return None
    return given if given is not None else output.with_name(output.name + ".journal")


def _fail(message: object, code: int = 1) -> NoReturn:
    """Print one line to stderr, with no markup read into it, and exit with ``code``."""
    Console(stderr=True).print(f"error: {message}", soft_wrap=True, highlight=False,
                               markup=False, style="red")
    sys.exit(code)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


main.add_command(decompose_command)
main.add_command(demo)
fleet.add_command(fleet_k8s)
fleet.add_command(fleet_slurm)
main.add_command(deploy)

from fitwork.llm.cli import llm, with_llm_section  # noqa: E402 - the LLM group, wired here only

main.add_command(llm)
main.add_command(with_llm_section(report))  # `fitwork report`, and its --llm section


if __name__ == "__main__":
    main()
