"""`fitwork run`: parse the flags, load the pipeline and the plan, and run it through
`fitwork.run` into the output (a file, or a directory's parts), journaled for ``--resume``."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

from fitwork.commands.common import Null, Terminated, fail, on_sigterm, parse_workers
from fitwork.commands.decompose import (
    AUTO,
    decompose_option,
    load_pipeline_for,
    resolve_reference,
    sample_items,
)
from fitwork.commands.fit import batch_changes
from fitwork.commands.options import (
    UnitSettings,
    csv_strings_option,
    output_mode_option,
    unit_options,
)
from fitwork.commands.run_output import (
    STDOUT,
    claim_stdout,
    journal_dir,
    prepare_output,
    refuse_overwriting_inputs,
    say_decomposed,
    stdout_closed,
    summarise,
)
from fitwork.engine.registry import ENGINES
from fitwork.errors import FitworkError
from fitwork.report.metrics import combine_progress, exporter_for, metrics_options


@click.command()
@click.argument("pipeline_ref", metavar="MODULE_OR_FILE:PIPELINE", required=False)
@click.option("--input", "input_text", type=click.Path(),
              help="JSON Lines, CSV, Parquet, or a directory (one item per file); with a "
                   "directory --output, files, globs or a directory of data files, read by "
                   "the replicas.")
@click.option("--output", "output_text", type=click.Path(),
              help="Where outputs go: JSON Lines, or Parquet by the .parquet suffix; a "
                   "directory (DIR/) has the last unit's replicas write parts into it; - "
                   "writes JSON Lines to stdout (no journal; everything else goes to "
                   "stderr, and failed items to ./dead-letters.jsonl).")
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
@click.option("--keep-warm", type=click.FloatRange(min=0), default=0.0, metavar="SECONDS",
              help="With --engine ray on a long-lived cluster (--ray-address): keep the "
                   "replicas alive SECONDS after the run, so the next run of the same "
                   "pipeline there adopts them instead of starting new ones.")
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
@click.option("--jobs", "jobs_path", type=click.Path(path_type=Path),
              help="Run every pipeline of a jobs file at once, each with its own output, "
                   "journal, dead letters and record (with --plan: a `fitwork plan --jobs` "
                   "fleet plan, re-fitted as pipelines arrive and finish).")
@click.option("--fleet-record", type=click.Path(path_type=Path),
              help="With --jobs: write the fleet record (shares, decisions) here.")
@click.option("--control", type=click.Path(path_type=Path), hidden=True,
              help="A control file a fleet run resizes this run's units through.")
@csv_strings_option
@metrics_options
@decompose_option
@output_mode_option
@unit_options
def run(pipeline_ref: str | None, input_text: str | None, output_text: str | None,
        workers: tuple[str, ...], ordered: bool, dead_letter: Path | None,
        record_path: Path | None, max_failures: int | None, plan_path: Path | None,
        node_type: str | None, adapt: bool, monolithic: bool, engine: str,
        ray_address: str | None, ray_tasks: bool, keep_warm: float,
        quiet: bool, limit: int | None, journal_path: Path | None, no_journal: bool,
        resume: bool, metrics_port: int | None, metrics_host: str,
        decompose: str | None, csv_strings: bool = False, mode: str | None = None,
        cpus: tuple[str, ...] = (), batch: tuple[str, ...] = (),
        io: tuple[str, ...] = (), bad_input: str = "error", jobs_path: Path | None = None,
        fleet_record: Path | None = None, control: Path | None = None) -> None:
    """Run a pipeline over an input file, on this host or on a Ray cluster."""
    if jobs_path is not None:
        return _run_jobs(jobs_path, plan_path, engine, resume, ray_address, fleet_record)
    input_text, output_text = _both_given(input_text, output_text)
    errors = Console(stderr=True)
    output_path = Path(output_text)
    to_stdout = output_text == STDOUT
    replicas = parse_workers(workers)
    settings = UnitSettings.parse(cpus, batch, io)
    _refuse_pairs(ray_tasks, engine, settings, adapt, keep_warm, ray_address)
    pipeline_ref, decompose = resolve_reference(pipeline_ref, decompose)
    sharded, dead_letter, where = _places(output_text, ordered, dead_letter, journal_path,
                                          no_journal, resume, mode)
    refuse_overwriting_inputs(pipeline_ref, Path(input_text), plan_path, decompose, output_path,
                              record_path, dead_letter, where)
    # the input's problem is said before anything about the output
    source = _source(input_text, output_path, sharded, limit, csv_strings, bad_input)
    if not to_stdout:
        prepare_output(output_path, sharded, mode, resume, where, errors)
    stream = claim_stdout() if to_stdout else None
    asked = dict(workers=replicas, ordered=ordered, dead_letter=dead_letter,
                 max_failures=max_failures, engine=engine, journal=where, resume=resume,
                 append=mode == "append", limit=limit,
                 **_ray_options(engine, ray_address, ray_tasks, keep_warm))
    signal.signal(signal.SIGTERM, on_sigterm)
    job: Any = None
    try:
        pipeline, placement, planned = _load(
            pipeline_ref, decompose, input_text, csv_strings, sharded, plan_path, adapt,
            monolithic, node_type, settings, errors)
        total = None if quiet else _total(source, input_text, limit, resume, where)
        relay = _Relay()
        job = _job(pipeline, source, stream or output_path, sharded, placement,
                   adapt and not monolithic, relay, asked, control)
        record = _go(job, relay, None if quiet else (total, pipeline.name),
                     (metrics_port, metrics_host), record_path, errors)
    except KeyboardInterrupt as stop:
        _stopped(stop, job, output_path, record_path)
    except BrokenPipeError:
        stdout_closed(stream, job)
    except FitworkError as exc:
        _failed(exc, job, record_path)
    wrote = (f"wrote {record.outputs:,} outputs in parts to {output_path}/" if sharded
             else f"wrote {job.written:,} outputs to {'stdout' if to_stdout else output_path}")
    summarise(record, planned, monolithic, record_path, max_failures, wrote,
              adapted=adapt and not monolithic)


def _run_jobs(jobs_path: Path, plan_path: Path | None, engine: str, resume: bool,
              ray_address: str | None, fleet_record: Path | None) -> None:
    """``--jobs``: every pipeline of a jobs file at once (`fitwork.jobs.cli`)."""
    from fitwork.jobs.cli import run_jobs_command

    return run_jobs_command(jobs_path, plan_path, engine, resume, ray_address, fleet_record)


def _both_given(input_text: str | None, output_text: str | None) -> tuple[str, str]:
    """``--input`` and ``--output``, refused where either is missing (without ``--jobs``)."""
    if input_text is None or output_text is None:
        raise click.UsageError(f"Missing option '--{'input' if input_text is None else 'output'}'"
                               " (or give --jobs JOBS.yaml)")
    return input_text, output_text


def _places(output_text: str, ordered: bool, dead_letter: Path | None,
            journal_path: Path | None, no_journal: bool, resume: bool, mode: str | None
            ) -> tuple[bool, Path, Path | None]:
    """Whether the output is a directory of parts, where the dead letters go and the
    journal's directory (None: no journal); --ordered with a directory output refused."""
    from fitwork.io.journaled import names_directory

    output_path, to_stdout = Path(output_text), output_text == STDOUT
    sharded = names_directory(output_text)
    if ordered and sharded:
        fail(f"--ordered with --output {output_text}: the replicas write the parts of a "
             "directory output each on its own, so no input order is kept; drop --ordered, "
             "or give a file --output (out.jsonl) to have the outputs in input order", code=2)
    dead_letter = dead_letter or _dead_letters(output_path, sharded, to_stdout)
    where = None if to_stdout and _stdout_alone(journal_path, resume, mode) else \
        journal_dir(journal_path, no_journal, resume, output_path)
    return sharded, dead_letter, where


def _failed(exc: FitworkError, job: Any, record_path: Path | None) -> NoReturn:
    """The run's error in one line, with where its record is and what was left."""
    saved = f" (run record in {record_path})" if record_path and job and job.recorded else ""
    fail(f"{exc}{saved}{job.note if job else ''}")


def _stdout_alone(journal: Path | None, resume: bool, mode: str | None) -> bool:
    """``--output -`` with what a stream cannot do refused in one line; True otherwise."""
    for given, flag in ((journal is not None, "--journal"), (resume, "--resume"),
                        (mode is not None, f"--mode {mode}")):
        if given:
            raise click.UsageError(f"{flag} with --output -: stdout keeps nothing a journal "
                                   "could resume or append to; write to a file "
                                   "(--output out.jsonl), or drop " + flag.split()[0])
    return True


def _refuse_pairs(ray_tasks: bool, engine: str, settings: UnitSettings, adapt: bool,
                  keep_warm: float, ray_address: str | None) -> None:
    """Flags that do not go together: a usage error naming them."""
    if ray_tasks and engine != "ray":
        raise click.UsageError("--ray-tasks runs on Ray: add --engine ray")
    if settings and adapt:
        raise click.UsageError("--cpus/--batch/--io with --adapt: a re-fit would change "
                               "them again; drop --adapt or the per-unit flags")
    if keep_warm and (engine != "ray" or not (ray_address or os.environ.get("RAY_ADDRESS"))):
        raise click.UsageError("--keep-warm keeps replicas on a cluster that outlives the "
                               "run: add --engine ray --ray-address ADDRESS")


def _dead_letters(output: Path, sharded: bool, to_stdout: bool) -> Path:
    """Where dead letters go unless --dead-letter says: in a directory output, in the working
    directory when the outputs go to stdout, else beside the output file."""
    if sharded:
        return output / "_dead-letters.jsonl"
    if to_stdout:
        return Path("dead-letters.jsonl")
    return output.with_name(output.name + ".dead-letters.jsonl")


def _ray_options(engine: str, address: str | None, tasks: bool, keep_warm: float
                 ) -> dict[str, Any]:
    """The Ray engine's options the flags asked for (none on another engine)."""
    if engine != "ray":
        return {}
    return ({"address": address} if address else {}) | (
        {"task_replicas": True} if tasks else {}) | ({"keep_warm": keep_warm} if keep_warm else {})


def _load(pipeline_ref: str, decompose: str | None, input_text: str, csv_strings: bool,
          sharded: bool, plan_path: Path | None, adapt: bool, monolithic: bool,
          node_type: str | None, settings: UnitSettings, errors: Console
          ) -> tuple[Any, Any, Any]:
    """The pipeline (decomposed on the input's items where asked), the placement or plan it
    runs with, and the plan read (or None); the per-unit flags applied to both."""
    sample = None
    if decompose == AUTO and plan_path is None:  # a plan names the units by source alone
        def sample() -> Any:
            return sample_items(input_text, csv_types=not csv_strings, rows=sharded)
    pipeline = load_pipeline_for(pipeline_ref, decompose, sample=sample)
    if sample is not None:
        say_decomposed(errors, pipeline, input_text)
    if adapt and not plan_path:
        raise click.UsageError("--adapt re-fits a plan while the run goes on: give "
                               "--plan FILE")
    placement: Any = None  # a Placement, or the plan itself where --adapt re-fits it
    planned = None
    if plan_path:
        from fitwork.fit.plan import Plan

        planned = Plan.load(plan_path)
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
    return pipeline, placement, planned


def _source(input_text: str, output: Path, sharded: bool, limit: int | None,
            csv_strings: bool, bad_input: str) -> Any:
    """The input: shards the replicas read (a directory output), or items read here; its
    problem (a `FitworkError`) said in one line."""
    if sharded:
        from fitwork.io.shards import Source

        if limit is not None:
            raise click.UsageError(f"--limit with --output {output}: a quick look reads "
                                   "through the driver; give a file --output (out.jsonl)")
        try:
            return Source.files(input_text, csv_types=not csv_strings, bad_input=bad_input)
        except FitworkError as exc:
            fail(exc)
    from fitwork.io.inputs import read_items

    try:
        return read_items(Path(input_text), csv_types=not csv_strings, bad_input=bad_input)
    except FitworkError as exc:
        fail(exc)


def _total(source: Any, input_text: str, limit: int | None, resume: bool,
           where: Path | None) -> int | None:
    """How many items (or shards) the progress bar counts to: those not done yet."""
    from fitwork.io.shards import Source

    if isinstance(source, Source):
        total = source.count
    else:
        from fitwork.io.inputs import count_items

        total = count_items(Path(input_text))
        if limit is not None and total is not None:
            total = min(total, limit)
    if total is not None and resume and where is not None:
        from fitwork.io.journal import load

        total = max(0, total - load(where).done.count)
    return total


class _Relay:
    """The run's progress callback, pointed at the bar and the exporter once they are up."""

    def __init__(self) -> None:
        self.to: Any = None
        self.control: Any = None  # a fleet run's control file, read at each report

    def __call__(self, snapshot: Any) -> None:
        if self.to is not None:
            self.to(snapshot)
        if self.control is not None:
            self.control.poll()


def _job(pipeline: Any, source: Any, output: Any, sharded: bool, placement: Any,
         adapt: bool, progress: _Relay, asked: dict[str, Any], control: Path | None) -> Any:
    """The run into the output, not started: `fitwork.run` with ``output=``; with
    ``control`` (a fleet run's control file), resized through it at each report."""
    from fitwork.engine.parts import Sink
    from fitwork.io.journaled import Run
    from fitwork.runner import run as run_pipeline

    job = run_pipeline(pipeline, source, placement=placement, adapt=adapt, progress=progress,
                       output=Sink.files(output) if sharded else output, **asked)
    assert isinstance(job, Run)
    if control is not None:
        from fitwork.jobs.control import Control

        progress.control = Control(control, job)
    return job


def _go(job: Any, relay: _Relay, bar: tuple[int | None, str] | None,
        metrics: tuple[int | None, str], record_path: Path | None, errors: Console) -> Any:
    """Start the run (journal, output, engine), then show its progress and serve its
    metrics until it ends; save its record, also when it stops."""
    from fitwork.report.terminal import ProgressView

    view = ProgressView(errors, *bar) if bar is not None else None
    try:
        with job, view if view is not None else Null() as live, \
                exporter_for(*metrics) as exporter:
            relay.to = combine_progress(live, exporter)
            if exporter is not None:
                errors.print(f"serving metrics on {exporter.url}", markup=False)
            return job.wait()
    finally:
        if record_path and job.recorded is not None:
            job.recorded.save(record_path)


def _stopped(stop: KeyboardInterrupt, job: Any, output: Path, record_path: Path | None
             ) -> NoReturn:
    """Ctrl-C or SIGTERM: one line on what stopped, where things are, and what was left."""
    what = "terminated" if isinstance(stop, Terminated) else "interrupted"
    saved = f"; run record in {record_path}" if record_path and job and job.recorded else ""
    left = job.note if job else ""
    where_to = "" if left.startswith("; no item") else f"; outputs so far are in {output}"
    fail(f"{what}: workers stopped{where_to}{saved}{left}",
         code=143 if isinstance(stop, Terminated) else 130)
