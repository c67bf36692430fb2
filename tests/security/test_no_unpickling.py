"""No reader of files unpickles: only frames from this run's own processes are unpickled."""

from __future__ import annotations

import ast
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

import fitwork
from fitwork.decomposition.report import Decomposition
from fitwork.errors import FitworkError
from fitwork.fit.plan import Plan
from fitwork.hardware.fleet import Fleet
from fitwork.io.formats import pyarrow_reads_safely
from fitwork.io.inputs import read_items
from fitwork.profiling import PipelineProfile
from fitwork.telemetry.record import RunRecord

from .conftest import assert_one_error_line, run_cli

SOURCE = Path(fitwork.__file__).parent
DESERIALIZERS = {
    ("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"),
    ("cloudpickle", "load"), ("cloudpickle", "loads"), ("dill", "load"), ("dill", "loads"),
    ("marshal", "load"), ("marshal", "loads"), ("shelve", "open"), ("joblib", "load"),
    ("torch", "load"), ("yaml", "unsafe_load"), ("yaml", "full_load"), ("yaml", "load_all"),
}
# the modules allowed to unpickle what this run's own processes made: frames between them
# (wire.py checks that a spilled frame's file is this user's private file before it maps
# it), and on Ray the unit its driver pickled by value, which a replica loads from the
# run's own object store (a cluster joined with its token), and the frames between a Ray
# replica and the child it forks, over a socket pair only those two processes hold; and
# the profiler, which times unpickling the bytes it has just pickled in the same process
# from items it already holds (they never leave it, nor come from a file)
ALLOWED = {("engine/local/wire.py", "pickle", "loads"),
           ("profiling/profiler.py", "pickle", "loads"),
           ("engine/ray/replica.py", "cloudpickle", "loads"),
           ("engine/ray/forked.py", "cloudpickle", "loads")}


def calls(tree: ast.AST) -> list[tuple[str, str, ast.Call]]:
    """(module name, attribute, call) for each ``a.b(...)`` / ``a.x.b(...)`` call."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            found.append((name, node.func.attr, node))
    return found


def test_no_module_deserializes_code_carrying_formats_outside_the_wire() -> None:
    offenders = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = str(path.relative_to(SOURCE))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in {"pickle", "cloudpickle",
                                                                    "dill", "marshal"}:
                bad = [a.name for a in node.names if a.name.startswith(("load", "Unpickler"))]
                if bad:
                    offenders.append(f"{relative}:{node.lineno}: from {node.module} import "
                                     f"{', '.join(bad)}")
        for owner, attr, call in calls(tree):
            if (owner, attr) in DESERIALIZERS and (relative, owner, attr) not in ALLOWED:
                offenders.append(f"{relative}:{call.lineno}: {owner}.{attr}")
            if owner == "yaml" and attr == "load":
                loader = {k.arg: k.value for k in call.keywords}.get("Loader")
                if not (isinstance(loader, ast.Name) and "SAFE" in loader.id.upper()):
                    offenders.append(f"{relative}:{call.lineno}: yaml.load without a safe loader")
            if attr == "load" and owner in {"np", "numpy"}:
                keywords = {k.arg: k.value for k in call.keywords}
                flag = keywords.get("allow_pickle")
                if isinstance(flag, ast.Constant) and flag.value:
                    offenders.append(f"{relative}:{call.lineno}: numpy.load(allow_pickle=True)")
    assert offenders == []


def test_the_scan_catches_what_it_looks_for() -> None:
    sample = ast.parse("import pickle\npickle.load(f)\nray.cloudpickle.loads(b)\n")
    found = {(owner, attr) for owner, attr, _ in calls(sample)}
    assert {("pickle", "load"), ("cloudpickle", "loads")} <= found


class Trap:
    """Unpickling this creates the file ``path``: proof that something unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.path),))


@pytest.fixture
def trap(tmp_path: Path) -> tuple[bytes, Path]:
    marker = tmp_path / "unpickled"
    return pickle.dumps(Trap(marker), protocol=pickle.HIGHEST_PROTOCOL), marker


def test_pickles_given_as_files_are_never_unpickled(tmp_path: Path,
                                                     trap: tuple[bytes, Path]) -> None:
    payload, marker = trap
    pickle.loads(payload)  # the trap works: unpickling it makes the marker
    assert marker.is_dir()
    marker.rmdir()
    loaders = [Plan.load, PipelineProfile.load, RunRecord.load, Decomposition.load,
               Fleet.from_yaml, lambda p: list(read_items(p))]
    for name in ("plan.json", "items.jsonl", "items.csv", "items.pkl", "fleet.yaml"):
        path = tmp_path / name
        path.write_bytes(payload)
        for load in loaders:
            with pytest.raises(FitworkError) as raised:
                load(path)
            assert "\n" not in str(raised.value) and str(path) in str(raised.value)
    assert not marker.exists()


def test_cli_refuses_a_pickle_as_plan_and_input(project: Path, trap: tuple[bytes, Path]) -> None:
    payload, marker = trap
    (project / "bad.plan").write_bytes(payload)
    (project / "bad.jsonl").write_bytes(payload)
    done = run_cli("run", "squares.py:pipeline", "--input", "in.jsonl", "--output",
                       "out.jsonl", "--plan", "bad.plan", "-q", cwd=project)
    assert_one_error_line(done, "bad.plan", "not a fitwork plan", "fitwork plan")
    done = run_cli("run", "squares.py:pipeline", "--input", "bad.jsonl", "--output",
                       "out.jsonl", "-q", cwd=project)
    assert_one_error_line(done, "bad.jsonl:1")
    assert not marker.exists()


def test_parquet_is_read_only_with_a_pyarrow_that_unpickles_nothing() -> None:
    assert not pyarrow_reads_safely("14.0.0") and not pyarrow_reads_safely("0.14.1")
    assert pyarrow_reads_safely("14.0.1") and pyarrow_reads_safely("26.0.1")
