"""The `decompose` command and the `--decompose` helpers, on a real module file."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import fitwork
from fitwork.commands.decompose import AUTO, decompose_command, load_pipeline_for
from fitwork.decomposition import Decomposition
from fitwork.errors import PipelineLoadError
from fitwork.profiling import PipelineProfile

MODULE = textwrap.dedent("""
    import time

    from fitwork import Pipeline, unit

    def work(item):
        n = int(item["n"])
        time.sleep(0.004)
        total = sum(i * i for i in range(30000 + n))
        return {"n": n, "total": total}

    pipeline = Pipeline(unit(work), name="already")
""")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "mod.py").write_text(MODULE)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(6)))
    return tmp_path


def test_decompose_prints_the_units_from_the_source_alone(project: Path) -> None:
    result = CliRunner().invoke(decompose_command, [f"{project}/mod.py:work"])
    assert result.exit_code == 0, result.output
    assert "work (" in result.output and "3 units" in result.output
    assert "receives: item    passes on: n" in result.output
    assert "note: no sample" in result.output
    assert result.output.rstrip().splitlines()[-1].startswith("result: n@")


def test_decompose_measures_writes_and_the_files_rebuild_the_units(project: Path) -> None:
    ref = f"{project}/mod.py:work"
    result = CliRunner().invoke(decompose_command, [
        ref, "--input", str(project / "in.jsonl"), "--samples", "4",
        "--output", str(project / "d.json"), "--profile-output", str(project / "p.json")])
    assert result.exit_code == 0, result.output
    assert "measured on 4 sample items" in result.output
    assert "io (measured)" in result.output and "cpu (measured)" in result.output
    assert "merged:" in result.output
    made = Decomposition.load(project / "d.json")
    profile = PipelineProfile.load(project / "p.json")
    rebuilt = load_pipeline_for(ref, str(project / "d.json"))
    assert [u.name for u in rebuilt.units] == [u.name for u in made.units] \
        == [u.name for u in profile.units]
    assert [u.demand() for u in rebuilt.units] == [u.resources for u in made.units]
    assert all(isinstance(u.io, int) for u in rebuilt.units)
    with fitwork.run(rebuilt, [{"n": 1}], ordered=True) as run:
        assert list(run) == [{"n": 1, "total": sum(i * i for i in range(30001))}]


def test_the_option_helpers_load_plain_or_decomposed(project: Path) -> None:
    ref = f"{project}/mod.py:work"
    assert [u.name for u in load_pipeline_for(ref, None).units] == ["work"]
    assert len(load_pipeline_for(ref, AUTO).units) == 3
    with pytest.raises(PipelineLoadError, match="already a Pipeline"):
        load_pipeline_for(f"{project}/mod.py:pipeline", AUTO)
    with pytest.raises(PipelineLoadError, match="name the function"):
        load_pipeline_for(f"{project}/mod.py", AUTO)


def test_decompose_errors_are_one_line(project: Path) -> None:
    result = CliRunner().invoke(decompose_command, [f"{project}/mod.py:nothing"])
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "has no 'nothing'" in result.output
    missing = CliRunner().invoke(decompose_command, [f"{project}/mod.py:work",
                                                     "--profile-output", "p.json"])
    assert missing.exit_code == 2 and "--profile-output needs --input" in missing.output
