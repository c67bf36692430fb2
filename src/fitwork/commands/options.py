"""Click options the commands share, and what they mean: inputs read alike, per-unit settings,
what to do with an existing output, paths a command writes that it also reads."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import click

from fitwork.placement import Placement
from fitwork.workload.pipeline import Pipeline

F = TypeVar("F", bound=Callable[..., Any])


def csv_strings_option(command: F) -> F:
    """``--csv-strings``, passed as ``csv_strings``: `run`, `profile` and `decompose` read
    a CSV input alike (numbers typed unless asked), so a unit is profiled on the values it
    will run on."""
    return click.option(
        "--csv-strings", is_flag=True,
        help="Keep every CSV field a string (by default a field that is a number arrives "
             "as an int or a float).")(command)


OUTPUT_MODES = ("error", "overwrite", "append")


def output_mode_option(command: F) -> F:
    """``--mode error|overwrite|append``, passed as ``mode`` (``None`` when not given)."""
    return click.option(
        "--mode", "mode", type=click.Choice(OUTPUT_MODES), default=None,
        help="What to do when --output already holds outputs: stop with an error (the "
             "default), overwrite it, or append to it (JSON Lines). --resume continues an "
             "interrupted run instead.")(command)


def unit_options(command: F) -> F:
    """``--cpus``, ``--batch`` and ``--io`` (``UNIT=VALUE``, repeatable), passed as ``cpus``,
    ``batch`` and ``io``: the decorator's ``cpu=``, ``batch_size=`` and ``io=`` of one unit,
    set for this run."""
    for flag, name, meta, text in (
            ("--io", "io", "UNIT=N", "Calls in flight in each replica of a unit (its io=)."),
            ("--batch", "batch", "UNIT=N", "Batch size of a batched unit (its batch_size=)."),
            ("--cpus", "cpus", "UNIT=X", "Cores one replica of a unit asks for (its cpu=; "
                                         "fractions allowed, e.g. parse=0.5).")):
        command = click.option(flag, name, multiple=True, metavar=meta,
                               help=text + " Repeat for several units.")(command)
    return command


@dataclass(frozen=True)
class UnitSettings:
    """Per-unit settings from the command line, applied to a pipeline and a placement."""

    cpus: dict[str, float] = field(default_factory=dict)
    batch: dict[str, int] = field(default_factory=dict)
    io: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, cpus: tuple[str, ...], batch: tuple[str, ...], io: tuple[str, ...]
              ) -> UnitSettings:
        """The flags' values, or a usage error naming the flag and the form it takes."""
        return cls(_pairs(cpus, "--cpus", float, 0.0, "parse=0.5"),
                   _pairs(batch, "--batch", int, 1, "embed=32"),
                   _pairs(io, "--io", int, 0, "fetch=16"))

    def __bool__(self) -> bool:
        return bool(self.cpus or self.batch or self.io)

    @property
    def names(self) -> set[str]:
        """Every unit a flag names."""
        return {*self.cpus, *self.batch, *self.io}

    def apply(self, pipeline: Pipeline, also: Iterable[str] = ()) -> Pipeline:
        """``pipeline`` with the named units' cores, batch size and I/O calls set.  A name
        must be one of its units (or of ``also``: the units a plan's placement names)."""
        known = [u.name for u in pipeline.units]
        unknown = sorted(self.names - set(known) - set(also))
        if unknown:
            flag = next(f for f, v in (("--cpus", self.cpus), ("--batch", self.batch),
                                       ("--io", self.io)) if unknown[0] in v)
            raise click.UsageError(f"{flag} {unknown[0]}=...: pipeline {pipeline.name!r} has "
                                   f"no unit {unknown[0]!r}; its units are {', '.join(known)}")
        for name, size in self.batch.items():
            if name in known and not pipeline.unit_named(name).batch_size:
                raise click.UsageError(
                    f"--batch {name}={size}: unit {name!r} is not batched (its function takes "
                    "one item); --batch sets the size of a unit declared with batch_size=")
        units = []
        for u in pipeline.units:
            changes: dict[str, Any] = {}
            if u.name in self.cpus:
                changes["resources"] = replace(u.resources, cpu=self.cpus[u.name])
                changes["cpu_given"] = True  # declared for this run: Ray holds it
            if u.name in self.batch:
                changes["batch_size"] = self.batch[u.name]
            if u.name in self.io:
                changes["io"] = self.io[u.name]
            units.append(replace(u, **changes) if changes else u)
        return Pipeline(units, name=pipeline.name, context=pipeline.context)

    def placed(self, placement: Placement) -> Placement:
        """A plan's placement with the named units' cores and batch size set: the flags win
        over the plan for those units, as ``--workers`` does for counts (and a unit the
        plan fuses is refused as ``--workers`` refuses it: `Placement.refuse_fused`)."""
        for flag, values in (("--cpus", self.cpus), ("--batch", self.batch), ("--io", self.io)):
            placement.refuse_fused(flag, values)
        groups = []
        for group in placement.groups:
            if group.unit in self.cpus and group.resources is not None:
                group = replace(group, resources=replace(group.resources,
                                                         cpu=self.cpus[group.unit]))
            if group.unit in self.batch and group.batch_size:
                group = replace(group, batch_size=self.batch[group.unit])
            groups.append(group)
        return replace(placement, groups=tuple(groups))


N = TypeVar("N", int, float)


def _pairs(values: tuple[str, ...], flag: str, kind: Callable[[str], N], least: N,
           example: str) -> dict[str, N]:
    """``UNIT=VALUE`` pairs as a dict; a usage error naming the flag for a malformed one."""
    found: dict[str, N] = {}
    for value in values:
        name, sep, text = value.partition("=")
        try:
            number: N | None = kind(text)
        except ValueError:
            number = None
        if number is None or number < least or (kind is float and number <= 0) or not sep \
                or not name:
            bound = "> 0" if kind is float else f">= {least}"
            raise click.BadParameter(f"{value!r}: write UNIT=VALUE with VALUE {bound}, e.g. "
                                     f"{example}", param_hint=flag)
        found[name] = number
    return found


C = TypeVar("C", bound=str)


def chosen(value: str, options: tuple[C, ...]) -> C:
    """``value`` as the one of ``options`` it is (a `click.Choice` of them refuses others)."""
    for option in options:
        if value == option:
            return option
    raise click.BadParameter(f"{value!r} is not one of {', '.join(options)}")


def conflicting_paths(writes: dict[str, Path | None], reads: dict[str, Path | None]
                      ) -> str | None:
    """A one-line error when a path the run writes is one it reads (or lies inside an input
    directory), else ``None``."""
    for flag, written in writes.items():
        if written is None:
            continue
        for source, read in reads.items():
            if read is None or not read.exists():
                continue
            same = _same_file(written, read)
            inside = read.is_dir() and not same and _inside(written, read)
            if same or inside:
                where = "is" if same else "lies inside"
                return (f"{flag} {written} {where} the {source} this command reads; it "
                        "would be overwritten: write to another path")
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b) if a.exists() else a.resolve() == b.resolve()
    except OSError:
        return False


def _inside(path: Path, directory: Path) -> bool:
    return directory.resolve() in path.resolve().parents


def holds_outputs(output: Path, directory: bool) -> bool:
    """Whether ``output`` already holds outputs a run would replace: a non-empty file (a
    Parquet file with rows, or one that cannot be read), or a directory with parts or a
    manifest."""
    if directory:
        if not output.is_dir():
            return False
        return any(e.name == "_manifest.json" or e.name.startswith(("part-", ".part-"))
                   for e in output.iterdir())
    if not output.is_file() or output.stat().st_size == 0:
        return False
    if output.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq

            return bool(pq.ParquetFile(output).metadata.num_rows)
        except Exception:
            return True
    return True
