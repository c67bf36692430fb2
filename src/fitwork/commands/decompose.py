"""Command-line pieces for decomposition: the ``decompose`` command and the ``--decompose`` option.

Register them in ``fitwork.cli``::

    main.add_command(decompose_command)            # fitwork decompose MODULE_OR_FILE:FUNCTION
    @decompose_option                               # on run, plan (and profile)
    pipeline = load_pipeline_for(pipeline_ref, decompose)   # instead of load_pipeline(...)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from fitwork.commands.options import csv_strings_option
from fitwork.decomposition.decomposer import MAX_SAMPLES, decompose
from fitwork.decomposition.render import render
from fitwork.decomposition.report import Decomposition
from fitwork.errors import FitworkError, PipelineLoadError
from fitwork.workload.pipeline import Pipeline
from fitwork.workload.unit import Unit

AUTO = "auto"
"""The value ``--decompose`` takes when given without a file: split by the source alone."""

F = TypeVar("F", bound=Callable[..., Any])


def decompose_option(command: F) -> F:
    """The ``--decompose [DECOMPOSITION]`` option, passed to the command as ``decompose``."""
    return click.option(
        "--decompose", "decompose", is_flag=False, flag_value=AUTO, default=None,
        metavar="[DECOMPOSITION]",
        help="The reference is a plain function: split it into units first. Alone, by its "
             "source; with a file from `fitwork decompose --output`, into exactly those units.",
    )(command)


def resolve_reference(reference: str | None, decompose_value: str | None
                      ) -> tuple[str, str | None]:
    """The target and the ``--decompose`` value, mended when the option swallowed the target.

    ``fitwork run --decompose my.py:fn ...`` reads ``my.py:fn`` as the option's value (a
    decomposition file) and leaves no target; a value that names a function (it has a
    ``:`` or ends in ``.py``) is the target, and ``--decompose`` then stands alone.
    """
    if reference is None and decompose_value not in (None, AUTO):
        value = str(decompose_value)
        if ":" in value or value.endswith(".py"):
            return value, AUTO
    if reference is None:
        raise click.UsageError("name what to run: MODULE_OR_FILE:PIPELINE (e.g. "
                               "examples/thumbnails.py:pipeline)")
    return reference, decompose_value


def load_function(reference: str) -> Callable[..., Any]:
    """The plain function ``MODULE_OR_FILE:FUNCTION`` names."""
    from fitwork.workload.loader import load_object

    if ":" not in reference:
        raise PipelineLoadError(f"{reference!r}: name the function, as MODULE_OR_FILE:FUNCTION "
                                "(e.g. examples/monolith.py:classify)")
    found = load_object(reference)
    if isinstance(found, Pipeline):
        raise PipelineLoadError(f"{reference!r} is already a Pipeline; --decompose splits a plain "
                                "function, so drop --decompose or name the function")
    if not callable(found):
        raise PipelineLoadError(f"{reference!r} is a {type(found).__name__}, not a function")
    return found


def load_pipeline_for(reference: str, decompose_value: str | None,
                      sample: Callable[[], Iterable[Any]] | None = None) -> Pipeline:
    """The pipeline to run or plan: as loaded, or the named function decomposed.

    A plain function marked with `with_context` keeps its context either way, so the
    monolithic baseline of such a function runs with its test server too.  ``sample``
    gives items to measure the pieces on when ``--decompose`` has no file (`fitwork run`
    passes its ``--input``, as `fitwork decompose --input` measures).
    """
    from fitwork.workload.loader import load_object, load_pipeline

    if decompose_value is None:
        found = load_object(reference)
        context = getattr(found, "__fitwork_context__", None)
        if context is not None and not isinstance(found, Pipeline | Unit):
            return Pipeline(found, name=found.__name__, context=context)
        return load_pipeline(reference)
    fn = load_function(reference)
    if decompose_value == AUTO:
        return decompose(fn, sample=sample() if sample is not None else None)
    return decompose(fn, layout=Decomposition.load(decompose_value))


def sample_items(input_text: str | Path, csv_types: bool, rows: bool | None = None
                 ) -> Iterator[Any]:
    """The items to measure a decomposition on: what a run over ``input_text`` hands the
    function.  ``rows`` True: the rows of its data files, read shard by shard as a sharded
    run's readers read them (``run --output DIR/``), a directory's data files included;
    False: its items as `read_items` yields them (a directory: its files' paths).  ``None``
    (`fitwork decompose`, which has no output to tell): rows where the input is a directory
    holding data files (``.jsonl``, ``.csv``, ``.parquet``), else its items."""
    from fitwork.io.inputs import read_items
    from fitwork.io.shards import FORMATS, Source

    path = Path(input_text)
    if rows is None:
        rows = path.is_dir() and any(
            p.is_file() and p.suffix.lower() in FORMATS and not p.name.startswith(".")
            for p in path.iterdir())
    if not rows:
        yield from read_items(path, csv_types=csv_types)
        return
    source = Source.files(str(input_text), csv_types=csv_types)
    for shard in source.shards:
        yield from source.read(shard)


def _fail(exc: Exception) -> NoReturn:
    click.echo(f"error: {exc}", err=True)
    sys.exit(1)


@click.command("decompose")
@click.argument("function_ref", metavar="MODULE_OR_FILE:FUNCTION")
@click.option("--input", "input_path", type=click.Path(path_type=Path),
              help="Sample items (any format `run` reads; a directory of data files by "
                   "their rows) to measure each unit on; without them the split comes from "
                   "the source alone.")
@click.option("--samples", default=MAX_SAMPLES, show_default=True, type=click.IntRange(min=1),
              help="How many sample items to measure on.")
@click.option("--no-fuse", is_flag=True, help="Keep every safe cut; join nothing.")
@click.option("--output", "-o", "output_path", type=click.Path(path_type=Path),
              help="Write the decomposition (JSON): `run`/`plan --decompose FILE` rebuild "
                   "exactly these units.")
@click.option("--profile-output", type=click.Path(path_type=Path),
              help="Write the units' profile (needs --input), for `fitwork plan --profile`.")
@csv_strings_option
def decompose_command(function_ref: str, input_path: Path | None, samples: int, no_fuse: bool,
                      output_path: Path | None, profile_output: Path | None,
                      csv_strings: bool = False) -> None:
    """Split a monolithic function into units; print each unit and what was merged."""
    try:
        if profile_output and not input_path:
            raise click.UsageError("--profile-output needs --input: a profile is measured")
        fn = load_function(function_ref)
        sample = sample_items(input_path, not csv_strings) if input_path else None
        pipeline = decompose(fn, sample=sample, samples=samples, fuse=not no_fuse)
    except FitworkError as exc:
        _fail(exc)
    made = pipeline.decomposition
    click.echo(render(made))
    if output_path:
        made.save(output_path)
        click.echo(f"wrote decomposition to {output_path}")
    if profile_output and made.profile is not None:
        made.profile.save(profile_output)
        click.echo(f"wrote profile to {profile_output}")
