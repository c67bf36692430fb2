"""A user's first tries on Ray, in subprocesses, on a 2-core Ray cluster started here.

The pipelines live where users keep them (a file given by path, a script's ``__main__``),
run unplanned and from a fused or split plan, through the real CLI and the Python API.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.held_ray import env, held_cluster

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="Ray is not installed: pip install 'fitwork[ray]'")
FITWORK = str(Path(sys.executable).with_name("fitwork"))
ITEMS = 120

FIVE = textwrap.dedent("""
    from fitwork import Pipeline

    def square(x):
        return x * x

    def inc(x):
        return x + 1

    def double(x):
        return 2 * x

    def negate(x):
        return -x

    def shift(x):
        return x + 1000

    pipeline = Pipeline(square, inc, double, negate, shift, name="five")
""")


def five(x: int) -> int:
    return -(2 * (x * x + 1)) + 1000


MAIN = textwrap.dedent("""
    import json, sys
    import fitwork
    from fitwork import Pipeline, unit

    OFFSET = 3

    def helper(x):
        return x + OFFSET

    @unit
    def clean(x):
        return helper(x)

    @unit(name="twice")
    def double(x):
        return 2 * x

    class Scale:
        def __init__(self):
            self.k = 10

        def __call__(self, x):
            return self.k * x

    def minus_one(x):
        return x - 1

    if __name__ == "__main__":
        pipeline = Pipeline(clean, double, Scale, minus_one, name="main")
        with fitwork.run(pipeline, range(int(sys.argv[2])), engine="ray",
                         address=sys.argv[1]) as result:
            print(json.dumps(list(result)))
""")

BIG = textwrap.dedent("""
    from fitwork import Pipeline, unit

    def prep(x):
        return x + 1

    @unit(cpu=64)
    def train(x):
        return x * 2

    pipeline = Pipeline(prep, train, name="big")
""")

UNLOADABLE = textwrap.dedent("""
    import sys
    import fitwork
    from fitwork import Pipeline

    def _missing():
        raise ModuleNotFoundError("No module named 'only_on_the_driver'")

    class Model:  # unpickles only where 'only_on_the_driver' is importable
        def __reduce__(self):
            return (_missing, ())

    MODEL = Model()

    def predict(x):
        return (MODEL, x)[1]

    if __name__ == "__main__":
        with fitwork.run(Pipeline(predict, name="unloadable"), range(10), engine="ray",
                         address=sys.argv[1]) as result:
            list(result)
""")


@pytest.fixture(scope="module")
def two_cores() -> Iterator[str]:
    """The address of a 2-CPU Ray cluster on this host, held by a process of its own."""
    with held_cluster("fw-ray2-") as address:
        yield address




def _run(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env())


def _inputs(folder: Path) -> Path:
    path = folder / "in.jsonl"
    path.write_text("".join(f"{i}\n" for i in range(ITEMS)))
    return path


def _outputs(path: Path) -> Counter[int]:
    return Counter(json.loads(line) for line in path.read_text().splitlines())


def _cli_run(folder: Path, address: str, output: str, *extra: str
             ) -> subprocess.CompletedProcess[str]:
    return _run([FITWORK, "run", "pipe.py:pipeline", "--engine", "ray", "--ray-address",
                 address, "--input", "in.jsonl", "--output", output, "-q", *extra], folder)


@pytest.mark.timeout(300)
def test_five_plain_units_unplanned_from_a_file_path_run_on_two_cores(
        two_cores: str, tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(FIVE)
    _inputs(tmp_path)
    done = _cli_run(tmp_path, two_cores, "out.jsonl")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _outputs(tmp_path / "out.jsonl") == Counter(five(i) for i in range(ITEMS))


@pytest.mark.timeout(300)
def test_a_main_script_of_unit_functions_plain_functions_and_a_class_runs_on_ray(
        two_cores: str, tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(MAIN)
    done = _run([sys.executable, "script.py", two_cores, str(ITEMS)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = json.loads(done.stdout.strip().splitlines()[-1])
    assert Counter(outputs) == Counter(10 * 2 * (x + 3) - 1 for x in range(ITEMS))


@pytest.mark.timeout(420)
def test_a_fused_and_a_split_plan_of_a_file_path_pipeline_run_on_ray(
        two_cores: str, tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(FIVE)
    _inputs(tmp_path)
    profiled = _run([FITWORK, "profile", "pipe.py:pipeline", "--input", "in.jsonl",
                     "--samples", "16", "-o", "profile.json"], tmp_path)
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    for name, extra in (("fused", []), ("split", ["--no-fuse"])):
        planned = _run([FITWORK, "plan", "pipe.py:pipeline", "--profile", "profile.json",
                        "--fleet", "local", "-o", f"{name}.json", *extra], tmp_path)
        assert planned.returncode == 0, planned.stderr[-3000:]
    assert json.loads((tmp_path / "split.json").read_text())["fused"] is False
    # five trivial maps fuse, as a rule; on a busy host the fit may keep them split, and
    # then the plan's monolithic baseline is the fused run (the same fused unit and plan)
    fused = [] if json.loads((tmp_path / "fused.json").read_text())["fused"] else \
        ["--monolithic"]
    expected = Counter(five(i) for i in range(ITEMS))
    for plan, extra in (("fused", fused), ("fused", [*fused, "--ray-tasks"]), ("split", [])):
        output = f"{plan}{len(extra)}.jsonl"
        done = _cli_run(tmp_path, two_cores, output, "--plan", f"{plan}.json", *extra)
        assert done.returncode == 0, f"{plan} {extra}: {done.stderr[-3000:]}"
        assert "fix its constructor" not in done.stderr
        assert _outputs(tmp_path / output) == expected, (plan, extra)


@pytest.mark.timeout(300)
def test_a_declared_cpu_no_node_can_hold_fails_at_once_naming_the_unit_and_the_fix(
        two_cores: str, tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(BIG)
    _inputs(tmp_path)
    done = _cli_run(tmp_path, two_cores, "out.jsonl")
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    # the line that says so before any replica is started, not the start-up timeout's
    assert errors[0].startswith("error: unit 'train' asks Ray for 64 CPU per replica"), errors
    assert "2 CPU" in errors[0] and "--cpus train=N" in errors[0]
    assert "not placed within" not in done.stderr


@pytest.mark.timeout(300)
def test_a_unit_its_worker_cannot_load_is_named_with_the_cause_not_the_constructor(
        two_cores: str, tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(UNLOADABLE)
    done = _run([sys.executable, "script.py", two_cores], tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("fitwork.errors.EngineError: a Ray worker could not load unit "
                           "'predict': ModuleNotFoundError: No module named "
                           "'only_on_the_driver'"), done.stderr[-3000:]
    assert "fix its constructor" not in done.stderr
