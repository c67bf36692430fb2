"""A real Slurm controller on this host: `fitwork fleet slurm` reads it back, and the hetjob
`fitwork deploy slurm` writes runs the pipeline on Ray across both nodes, with the planned
labels, every output exactly once, and no Ray process left however the job ends.  Skips,
with the reason, where Slurm cannot run here (see slurm_harness)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fitwork.hardware.fleet import Fleet
from fitwork.orchestrate.shape import plan_shapes
from fitwork.orchestrate.slurm_fleet import read_live

from .helpers import ROOT, fitwork, plan_on
from .slurm_harness import SlurmCluster, Unavailable

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    __import__("importlib").util.find_spec("ray") is None,
    reason="Ray is not installed: pip install 'fitwork[ray]'")]
PIPELINE = "tests.orchestrate.slurm_pipeline:pipeline"


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    cluster = SlurmCluster()
    try:
        cluster.start()
    except (Unavailable, subprocess.TimeoutExpired, OSError) as exc:
        cluster.stop()
        pytest.skip(f"no Slurm test cluster: {exc}")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", str(cluster.conf))  # for read_live in this process
            yield cluster
    finally:
        cluster.stop()


def job_env(cluster: SlurmCluster) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**cluster.env, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(ROOT), "FITWORK_PYTHON": sys.executable,
            "RAY_AUTH_MODE": "disabled"}


def ray_processes(job: str) -> list[psutil.Process]:
    """Processes of the job's Ray nodes (their command lines name its Ray directory)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if f"/tmp/fwr-{job}/" in " ".join(process.info["cmdline"] or []):
                found.append(process)
    return found


def submit(cluster: SlurmCluster, tmp_path: Path, items: int) -> tuple[str, Path, Path]:
    plan = plan_on(read_live(), "fw-h100", "fw-cpu")
    plan.save(tmp_path / "plan.json")
    (tmp_path / "in.jsonl").write_text("".join(f"{i}\n" for i in range(items)))
    done = fitwork("deploy", "slurm", str(tmp_path / "plan.json"), "-o", str(tmp_path / "job"),
                   "--pipeline", PIPELINE, "--input", str(tmp_path / "in.jsonl"),
                   "--output", str(tmp_path / "out.jsonl"), env=cluster.env)
    assert done.returncode == 0, done.stderr
    sent = subprocess.run(["sbatch", "--parsable", str(tmp_path / "job" / "fitwork.sbatch")],
                          capture_output=True, text=True, env=job_env(cluster), timeout=30,
                          cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    job = sent.stdout.strip().split(";")[0]
    return job, tmp_path / "job" / f"fitwork-{job}.out", tmp_path / "out.jsonl"


def wait_gone(cluster: SlurmCluster, job: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True,
                                env=cluster.env, timeout=10)
        if not queued.stdout.strip():
            return
        time.sleep(1)
    pytest.fail(f"job {job} still queued after {timeout:g} s; slurmctld log: "
                f"{cluster.log('slurmctld.log')[-1500:]}")


def test_fleet_slurm_reads_the_controller_back(slurm: SlurmCluster, tmp_path: Path) -> None:
    done = fitwork("fleet", "slurm", "-o", str(tmp_path / "fleet.yaml"), env=slurm.env)
    assert done.returncode == 0, done.stderr
    fleet = Fleet.from_yaml(tmp_path / "fleet.yaml")
    assert {n.name: (n.count, n.cores, n.memory, n.devices) for n in fleet.node_types} == {
        "fw-h100": (1, 4, 3000 * 2**20, {"H100-SXM": 2}),
        "fw-cpu": (1, 4, 3000 * 2**20, {}),
    }


def test_the_hetjob_runs_the_plan_on_ray_and_stops_it(slurm: SlurmCluster,
                                                       tmp_path: Path) -> None:
    job, log, out = submit(slurm, tmp_path, 200)
    try:
        wait_gone(slurm, job, 150)
    finally:
        leftover = ray_processes(job)
        for process in leftover:
            with contextlib.suppress(psutil.Error):
                process.kill()
    text = log.read_text() if log.exists() else ""
    assert "fitwork: ray stopped; job exit 0" in text, text[-4000:]
    outputs = sorted(json.loads(line) for line in out.read_text().splitlines())
    assert outputs == [3 * x + 1 for x in range(200)]  # every item, exactly once
    plan = plan_on(read_live(), "fw-h100", "fw-cpu")
    ready = re.search(r"ray nodes ready: (.*)", text)
    assert ready is not None, text[-3000:]
    shapes = {s.name: s for s in plan_shapes(plan)}
    expected = sorted(
        f"{name} {dict(sorted({'CPU': float(s.cores), **({'GPU': float(s.device_slots), s.device_class: float(s.device_slots)} if s.device_slots else {})}.items()))}"  # noqa: E501
        for name, s in shapes.items())
    assert ready.group(1).split("; ") == expected
    assert leftover == [], [p.info["cmdline"][:2] for p in leftover]


def test_a_cancelled_job_leaves_no_ray_behind(slurm: SlurmCluster, tmp_path: Path) -> None:
    job, log, _ = submit(slurm, tmp_path, 100_000)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
            log.exists() and "ray nodes ready" in log.read_text()):
        time.sleep(0.5)
    assert log.exists() and "ray nodes ready" in log.read_text(), \
        log.read_text()[-3000:] if log.exists() else "no job log"
    time.sleep(3)  # the pipeline is running
    subprocess.run(["scancel", job], env=slurm.env, timeout=30, check=True)
    try:
        wait_gone(slurm, job, 90)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and ray_processes(job):
            time.sleep(0.5)
    finally:
        leftover = ray_processes(job)
        for process in leftover:
            with contextlib.suppress(psutil.Error):
                process.kill()
    assert leftover == []
    assert "fitwork: ray stopped; job exit 143" in log.read_text()
