"""The `fitwork` command, run for real in a subprocess on real files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from fitwork import RunRecord

PIPELINE = textwrap.dedent("""
    from fitwork import Pipeline, unit

    @unit(cpu=0.5)
    def parse(row):
        return int(row["n"]) if isinstance(row, dict) else int(row)

    @unit(kind="filter", cpu=0.25)
    def odd(n):
        return n % 2 == 1

    @unit(batch_size=4, cpu=0.5)
    def square(batch):
        return [{"n": n, "square": n * n} for n in batch]

    pipeline = Pipeline(parse, odd, square, name="squares")

    @unit
    def size(path):
        return len(open(path, "rb").read())

    sizes = Pipeline(size, name="sizes")

    @unit
    def slow(n):
        import time
        time.sleep(0.05)
        return n

    sleepy = Pipeline(slow, name="sleepy")

    @unit
    def picky(row):
        if int(row["n"]) % 10 == 3:
            raise ValueError(f"missing columns [x] in row {row['n']}")
        return row

    picky_pipeline = Pipeline(picky, name="picky")

    def plain(row):
        n = int(row["n"])
        doubled = n * 2
        return {"n": n, "doubled": doubled}
""")


def fitwork(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fitwork.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _write_project(root: Path) -> Path:
    (root / "squares.py").write_text(PIPELINE)
    (root / "in.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(50)))
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return _write_project(tmp_path)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[subprocess.CompletedProcess[str], bytes]:
    """`fitwork profile` of a project as `project` writes it, made once for the tests that
    read what it printed or plan from it (each writes the bytes into its own folder)."""
    root = _write_project(tmp_path_factory.mktemp("profiled"))
    done = fitwork("profile", "squares.py:pipeline", "--input", "in.jsonl", "--samples", "8",
                   "-o", "p.json", cwd=root)
    saved = root / "p.json"
    return done, saved.read_bytes() if saved.exists() else b""


def read_jsonl(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_version_and_help() -> None:
    version = subprocess.run([sys.executable, "-m", "fitwork.cli", "--version"],
                             capture_output=True, text=True, check=True)
    assert "fitwork, version" in version.stdout
    helped = subprocess.run([sys.executable, "-m", "fitwork.cli", "run", "--help"],
                            capture_output=True, text=True, check=True)
    assert "--workers" in helped.stdout and "--dead-letter" in helped.stdout


def test_import_pulls_in_no_optional_dependency() -> None:
    code = ("import sys, fitwork, fitwork.cli\n"
            "heavy = {'ray', 'torch', 'pyarrow', 'pynvml', 'onnxruntime'} & set(sys.modules)\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_command_imports_only_what_it_needs() -> None:
    """`fitwork run` loads neither the other commands nor scipy's statistics (which the LLM
    and calibration commands need): a run's start is the user's first wait."""
    code = ("import sys\n"
            "from fitwork.cli import main\n"
            "main(['run', '--help'], standalone_mode=False)\n"
            "loaded = {'fitwork.llm', 'fitwork.commands.orchestrate', 'fitwork_demo.cli',\n"
            "          'scipy.stats'} & set(sys.modules)\n"
            "assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    listed = subprocess.run([sys.executable, "-m", "fitwork.cli", "--help"],
                            capture_output=True, text=True, check=True).stdout
    for name in ("run", "profile", "plan", "fleet", "decompose", "demo", "deploy", "llm",
                 "report"):
        assert f"\n  {name} " in listed, name


def test_run_jsonl_to_jsonl_with_record(project: Path) -> None:
    done = fitwork("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "out.jsonl",
                   "--workers", "parse=2", "--ordered", "--record", "run.json", "-q",
                   cwd=project)
    assert done.returncode == 0, done.stderr
    outputs = read_jsonl(project / "out.jsonl")
    assert outputs == [{"n": n, "square": n * n} for n in range(1, 50, 2)]
    record = RunRecord.load(project / "run.json")
    assert record.items_completed == 50 and record.outputs == 25
    assert record.output_digest is not None and record.output_digest.startswith("25:")
    assert record.unit("parse").replicas == 2
    assert "throughput" in done.stdout and "utilization" in done.stdout


def test_csv_input_and_parquet_output(project: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    (project / "in.csv").write_text("n\n" + "".join(f"{i}\n" for i in range(20)))
    done = fitwork("run", "squares.py:pipeline", "--input", "in.csv", "--output", "out.parquet",
                   "-q", cwd=project)
    assert done.returncode == 0, done.stderr
    table = pq.read_table(project / "out.parquet").to_pylist()
    assert sorted(row["n"] for row in table) == list(range(1, 20, 2))


def test_directory_input(project: Path) -> None:
    folder = project / "files"
    folder.mkdir()
    for i in range(5):
        (folder / f"{i}.bin").write_bytes(b"x" * i)
    done = fitwork("run", "squares.py:sizes", "--input", "files", "--output", "sizes.jsonl",
                   "-q", cwd=project)
    assert done.returncode == 0, done.stderr
    assert sorted(read_jsonl(project / "sizes.jsonl")) == [0, 1, 2, 3, 4]


def test_missing_input_file(project: Path) -> None:
    done = fitwork("run", "squares.py:pipeline", "--input", "nope.jsonl", "--output", "o.jsonl",
                   cwd=project)
    assert done.returncode == 1
    assert "nope.jsonl" in done.stderr and "--input" in done.stderr
    assert "Traceback" not in done.stderr


def test_malformed_json_line_names_file_and_line_and_keeps_earlier_outputs(
        project: Path) -> None:
    lines = [json.dumps({"n": i}) for i in range(10)] + ["{not json"]
    (project / "bad.jsonl").write_text("\n".join(lines) + "\n")
    done = fitwork("run", "squares.py:pipeline", "--input", "bad.jsonl", "--output", "o.jsonl",
                   "-q", cwd=project)
    assert done.returncode == 1
    error = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(error) == 1 and "bad.jsonl:11" in error[0], done.stderr
    assert sorted(row["n"] for row in read_jsonl(project / "o.jsonl")) == [1, 3, 5, 7, 9]


def test_unknown_unit_in_workers(project: Path) -> None:
    done = fitwork("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "o.jsonl",
                   "--workers", "nosuch=2", cwd=project)
    assert done.returncode == 1
    assert "nosuch" in done.stderr and "parse, odd, square" in done.stderr


def test_ray_tasks_asks_for_the_ray_engine(project: Path) -> None:
    done = fitwork("run", "squares.py:sleepy", "--input", "in.jsonl", "--output", "o.jsonl",
                   "--ray-tasks", cwd=project)
    assert done.returncode == 2 and "--ray-tasks runs on Ray: add --engine ray" in done.stderr


def test_ray_tasks_runs_a_one_unit_pipeline_as_tasks(project: Path, ray_cluster: Any) -> None:
    done = fitwork("run", "squares.py:sleepy", "--input", "in.jsonl", "--output", "o.jsonl",
                   "--engine", "ray", "--ray-address", ray_cluster.address, "--ray-tasks",
                   "--record", "r.json", "--quiet", cwd=project)
    assert done.returncode == 0, done.stderr
    assert sorted(row["n"] for row in read_jsonl(project / "o.jsonl")) == list(range(50))
    record = json.loads((project / "r.json").read_text())
    assert record["engine"] == "ray" and record["items_completed"] == 50


def test_malformed_workers_option(project: Path) -> None:
    done = fitwork("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "o.jsonl",
                   "--workers", "parse", cwd=project)
    assert done.returncode == 2 and "UNIT=N" in done.stderr


@pytest.mark.parametrize("reference, message", [
    ("no_such_module:pipeline", "cannot import module 'no_such_module'"),
    ("squares.py:missing",
     "has no 'missing'; its pipelines are picky_pipeline, pipeline, sizes, sleepy"),
    ("absent.py:pipeline", "no such file"),
])
def test_pipeline_reference_that_does_not_resolve(project: Path, reference: str,
                                                  message: str) -> None:
    done = fitwork("run", reference, "--input", "in.jsonl", "--output", "o.jsonl", cwd=project)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr


def started(process: subprocess.Popen[str], journal: Path) -> None:
    """Wait until the run has journaled a checkpoint (its handlers are in place and outputs
    are written): a fixed sleep loses to a slow start on a busy host."""
    deadline = time.monotonic() + 120
    path = journal / "journal.jsonl"
    while process.poll() is None and time.monotonic() < deadline and (
            not path.exists() or len(path.read_bytes().splitlines()) < 2):
        time.sleep(0.05)
    assert process.poll() is None, "the run should still be going"


def test_ctrl_c_stops_the_cli_and_keeps_outputs(project: Path) -> None:
    (project / "many.jsonl").write_text("".join(f"{i}\n" for i in range(2000)))
    command = [sys.executable, "-m", "fitwork.cli", "run", "squares.py:sleepy", "--input",
               "many.jsonl", "--output", "o.jsonl", "--record", "run.json", "-q"]
    process = subprocess.Popen(command, cwd=project, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    started(process, project / "o.jsonl.journal")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert "interrupted" in err and "run record in run.json" in err
    written = read_jsonl(project / "o.jsonl")
    assert 0 < len(written) < 2000
    record = RunRecord.load(project / "run.json")
    assert record.status == "interrupted" and record.outputs >= len(written)


def test_sigterm_leaves_a_valid_parquet_file_and_a_record(project: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    (project / "many.jsonl").write_text("".join(f"{i}\n" for i in range(600)))
    command = [sys.executable, "-m", "fitwork.cli", "run", "squares.py:sleepy", "--input",
               "many.jsonl", "--output", "o.parquet", "--record", "run.json", "-q"]
    process = subprocess.Popen(command, cwd=project, stderr=subprocess.PIPE, text=True)
    started(process, project / "o.parquet.journal")
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 143, err
    assert "terminated" in err
    rows = pq.read_table(project / "o.parquet").num_rows  # a whole file, footer and all
    assert rows < 600
    assert RunRecord.load(project / "run.json").status == "interrupted"
    # the journal (on by default) lets the same command finish the run, each row once
    resumed = subprocess.run([*command, "--resume", "--workers", "slow=10"], cwd=project,
                             capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    values = sorted(r["value"] for r in pq.read_table(project / "o.parquet").to_pylist())
    assert values == list(range(600))
    assert not (project / "o.parquet.parts").exists()


def test_failed_items_exit_non_zero_unless_allowed(project: Path) -> None:
    done = fitwork("run", "squares.py:picky_pipeline", "--input", "in.jsonl", "--output",
                   "o.jsonl", "-q", cwd=project)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1
    assert "5 items failed; dead letters in o.jsonl.dead-letters.jsonl" in errors[0]
    letters = read_jsonl(project / "o.jsonl.dead-letters.jsonl")
    assert len(letters) == 5 and "missing columns [x]" in letters[0]["error"]
    assert len({letter["run_id"] for letter in letters}) == 1
    allowed = fitwork("run", "squares.py:picky_pipeline", "--input", "in.jsonl", "--output",
                      "o.jsonl", "-q", "--max-failures", "5", "--mode", "overwrite",
                      cwd=project)
    assert allowed.returncode == 0, allowed.stderr
    assert "5 failed items in o.jsonl.dead-letters.jsonl" in allowed.stdout
    stopped = fitwork("run", "squares.py:picky_pipeline", "--input", "in.jsonl", "--output",
                      "o.jsonl", "-q", "--max-failures", "2", "--mode", "overwrite", cwd=project)
    assert stopped.returncode == 1 and "more than max_failures=2" in stopped.stderr


def test_square_brackets_in_errors_survive(project: Path) -> None:
    done = fitwork("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "o.jsonl",
                   "--workers", "parse[2]=2", cwd=project)
    assert done.returncode == 1 and "no unit 'parse[2]'" in done.stderr, done.stderr


def test_decompose_before_the_target_still_finds_the_target(project: Path) -> None:
    done = fitwork("run", "--decompose", "squares.py:plain", "--input", "in.jsonl",
                   "--output", "o.jsonl", "-q", cwd=project)
    assert done.returncode == 0, done.stderr
    rows = read_jsonl(project / "o.jsonl")
    assert sorted(r["doubled"] for r in rows) == [2 * n for n in range(50)]


def test_results_go_to_stdout_and_errors_to_stderr(
        project: Path, profiled: tuple[subprocess.CompletedProcess[str], bytes]) -> None:
    done, _ = profiled
    assert done.returncode == 0 and "profile of squares" in done.stdout, done.stderr
    assert "wrote profile to p.json" in done.stdout
    ran = fitwork("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "o.jsonl",
                  "-q", cwd=project)
    assert "throughput" in ran.stdout and "wrote 25 outputs" in ran.stdout
    assert "throughput" not in ran.stderr


def test_fleet_local_prints_this_host_and_writes_yaml(tmp_path: Path) -> None:
    done = fitwork("fleet", "local", "-o", "local.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "cores" in done.stdout and "cpu-x86" in done.stdout
    from fitwork.hardware.fleet import Fleet

    fleet = Fleet.from_yaml(tmp_path / "local.yaml")
    assert fleet.node_types[0].cores >= 1


def test_profile_plan_and_run_with_the_plan_and_monolithic(
        project: Path, profiled: tuple[subprocess.CompletedProcess[str], bytes]) -> None:
    done, profile = profiled
    assert done.returncode == 0, done.stderr
    (project / "prof.json").write_bytes(profile)
    planned = fitwork("plan", "squares.py:pipeline", "--profile", "prof.json", "-o",
                      "plan.json", cwd=project)
    assert planned.returncode == 0, planned.stderr + planned.stdout
    ran = fitwork("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "o.jsonl",
                  "--plan", "plan.json", "--record", "r.json", "-q", cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert "plan predicted" in ran.stdout and "realized" in ran.stdout
    said = " ".join(ran.stdout.split())
    # 50 trivial rows: forking the replicas and the first frame's way take most of the run
    assert "too short to judge the plan by its whole" in said, said
    # the host's moment now against the profile's, read by the same probe
    speed = re.search(r"host speed now ([\d.]+)x what it was when the pipeline was profiled",
                      said)
    assert speed is not None and 0.2 < float(speed.group(1)) < 5, said
    items = re.search(r"a run of at least ([\d,]+) items compares", said)
    assert items and int(items.group(1).replace(",", "")) > 50, said
    from fitwork.fit.plan import Plan

    workers = Plan.load(project / "plan.json").placement().counts()
    record = RunRecord.load(project / "r.json")
    assert {u.name: u.replicas for u in record.units} == workers
    mono = fitwork("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "m.jsonl",
                   "--monolithic", "-q", cwd=project)
    assert mono.returncode == 0, mono.stderr
    assert sorted(read_jsonl(project / "m.jsonl"), key=lambda r: r["n"]) == \
        sorted(read_jsonl(project / "o.jsonl"), key=lambda r: r["n"])


def test_limit_runs_only_the_first_items(project: Path) -> None:
    done = fitwork("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "o.jsonl",
                   "--limit", "10", "--record", "r.json", cwd=project)
    assert done.returncode == 0, done.stderr
    assert sorted(r["n"] for r in read_jsonl(project / "o.jsonl")) == [1, 3, 5, 7, 9]
    assert RunRecord.load(project / "r.json").items_in == 10
    # 10 source items, 5 outputs: throughput in both
    assert "source items/s" in done.stdout and "outputs/s" in done.stdout
    refused = fitwork("run", "squares.py:pipeline", "--input", "in.jsonl", "--output",
                      "p.jsonl", "--limit", "0", cwd=project)
    assert refused.returncode == 2 and "--limit" in refused.stderr
