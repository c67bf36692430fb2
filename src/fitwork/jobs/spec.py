"""The jobs file: the pipelines that share one fleet, each with its input, output and share.

A jobs file is YAML with a top-level ``jobs:`` list; paths in it are relative to the file::

    jobs:
      - name: thumbs
        pipeline: pipelines/thumbs.py:pipeline   # MODULE_OR_FILE:PIPELINE
        input: data/thumbs.jsonl
        output: out/thumbs.jsonl
        weight: 2              # share under the fair objective (default 1)
        team: vision           # who pays (chargeback) and whose queue (Kueue)
        profile: thumbs.profile.json   # profiled on the spot when absent
        min_rate: 50           # items/s it must get, or it is not admitted
        quota: {cores: 1.5}    # the most it may hold: cores, and devices per class
        start_after: 10        # seconds after the first job starts (fitwork run --jobs)

Each job's dead letters, record and journal sit beside its output unless named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fitwork.errors import InputError
from fitwork.hardware.validation import one_line

__all__ = ["Job", "JobsFile", "JobsFileError", "load_jobs"]

Name = Annotated[str, Field(min_length=1, max_length=63,
                             pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]


class JobsFileError(InputError):
    """A jobs file that cannot be read or does not describe jobs; one line, naming the place."""


class Job(BaseModel):
    """One pipeline of the fleet, as the jobs file names it (paths resolved against the file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    pipeline: str = Field(min_length=3)
    input: Path
    output: Path
    weight: float = Field(default=1.0, gt=0)
    team: Name = "default"
    profile: Path | None = None
    min_rate: float | None = Field(default=None, gt=0)
    quota: dict[str, float] = Field(default_factory=dict)
    start_after: float = Field(default=0.0, ge=0)
    dead_letter: Path | None = None
    record: Path | None = None

    @field_validator("pipeline")
    @classmethod
    def _reference(cls, value: str) -> str:
        if ":" not in value:
            raise ValueError(f"{value!r} is not MODULE_OR_FILE:PIPELINE; name the pipeline "
                             "object after a colon, e.g. pipelines/thumbs.py:pipeline")
        return value

    @field_validator("quota")
    @classmethod
    def _quota(cls, value: dict[str, float]) -> dict[str, float]:
        bad = sorted(k for k, v in value.items() if not v >= 0)
        if bad:
            raise ValueError(f"quota {', '.join(bad)} must be 0 or more (cores, or devices of "
                             "a class)")
        return value

    @property
    def dead_letters(self) -> Path:
        """Where this job's failed items go."""
        return self.dead_letter or self.output.with_name(self.output.name + ".dead-letters.jsonl")

    @property
    def record_path(self) -> Path:
        """Where this job's run record goes."""
        return self.record or self.output.with_name(self.output.name + ".record.json")


class JobsFile(BaseModel):
    """Every job of a jobs file, in the order given (the order of admission)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jobs: list[Job] = Field(min_length=1)
    path: Path | None = None

    @field_validator("jobs")
    @classmethod
    def _unique(cls, jobs: list[Job]) -> list[Job]:
        names = [j.name for j in jobs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"job names must be unique; repeated: {', '.join(dupes)}")
        outputs = [j.output.resolve() for j in jobs]
        shared = sorted({str(o) for o in outputs if outputs.count(o) > 1})
        if shared:
            raise ValueError(f"two jobs write the same output {shared[0]}; give each its own")
        return jobs

    def job(self, name: str) -> Job:
        """The job named ``name``."""
        for j in self.jobs:
            if j.name == name:
                return j
        raise JobsFileError(f"{self.path}: no job named {name!r}; it has "
                            f"{', '.join(j.name for j in self.jobs)}")

    @property
    def teams(self) -> list[str]:
        """Every team, in order of first mention."""
        return list(dict.fromkeys(j.team for j in self.jobs))


_PATHS = ("input", "output", "profile", "dead_letter", "record")


def load_jobs(path: str | Path) -> JobsFile:
    """Read a jobs file; every problem is one `JobsFileError` line naming the file and field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise JobsFileError(f"jobs file {path}: no such file; write one with a top-level "
                            "'jobs:' list (see `fitwork plan --help`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise JobsFileError(f"jobs file {path}: cannot read ({exc}); check the path") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise JobsFileError(f"jobs file {path}{where}: not YAML "
                            f"({getattr(exc, 'problem', None) or exc}); fix the syntax") from None
    if not isinstance(raw, dict) or "jobs" not in raw:
        raise JobsFileError(f"jobs file {path}: needs a top-level 'jobs:' list of pipelines")
    if not isinstance(raw["jobs"], list):
        raise JobsFileError(f"jobs file {path}: 'jobs' must be a list, one entry per pipeline")
    base = path.resolve().parent
    jobs = []
    for entry in raw["jobs"]:
        if isinstance(entry, dict):
            entry = {k: (str(base / str(v)) if k in _PATHS and v is not None else v)
                     for k, v in entry.items()}
            ref = entry.get("pipeline")
            if isinstance(ref, str) and ":" in ref:
                target, _, attr = ref.rpartition(":")
                if target.endswith(".py") or "/" in target:
                    entry["pipeline"] = f"{base / target}:{attr}"
        jobs.append(entry)
    try:
        return JobsFile.model_validate({**raw, "jobs": jobs, "path": path})
    except ValidationError as exc:
        raise JobsFileError(f"jobs file {path}: {one_line(exc)}") from None
