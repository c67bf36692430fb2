"""A real Slurm controller on this host: `fitwork fleet slurm` reads it back (every GRES type
of a node kept), and the job `fitwork deploy slurm` writes runs the pipeline on Ray, with
the planned labels, every output exactly once, Ray's token authentication on, and no process
of the job left however the job ends: a hetjob of two node types (one of them two nodes),
and a plain job of one node type on a node with GRES of two GPU types.  A worker step that
fails stops the job at once, saying which and why.  Skips, with the reason, where Slurm
cannot run here (see slurm_harness)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
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
GATED = "tests.orchestrate.slurm_pipeline:gated"
HETJOB = ("fw-h100", "fw-cpu")


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


def job_env(cluster: SlurmCluster, **extra: str) -> dict[str, str]:
    """What sbatch gets: no Ray auth settings of this session's (the job makes its own)."""
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in cluster.env.items() if not k.startswith("RAY_AUTH")}
    return {**env, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(ROOT), "FITWORK_PYTHON": sys.executable, **extra}


def environ(process: psutil.Process) -> dict[str, str]:
    """A process's environment as it started ({} when it is gone or not readable; a process
    that retitles itself may have overwritten part of it)."""
    with contextlib.suppress(psutil.Error, OSError):
        return dict(process.environ())
    return {}


class JobWatch:
    """Finds a job's processes without their names: by the SLURM_JOB_ID that Slurm puts in
    the environment of the job's steps and every process they start inherits, and by the
    sessions such processes were seen in (a process that retitles itself, as Ray's do, may
    overwrite its environment; it stays in its session)."""

    def __init__(self, cluster: SlurmCluster, job: str) -> None:
        self.job = job
        self.sessions: set[int] = set()
        daemons = [os.getpid()]
        for pidfile in cluster.pidfiles:
            with contextlib.suppress(OSError, ValueError):
                daemons.append(int(pidfile.read_text().split()[0]))
        self.excluded = set()
        for pid in daemons:
            with contextlib.suppress(OSError):
                self.excluded.add(os.getsid(pid))

    def look(self) -> list[psutil.Process]:
        """The job's live processes now; notes the sessions of those found by environment."""
        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
                session = os.getsid(process.pid)
                if environ(process).get("SLURM_JOB_ID") == self.job:
                    if session not in self.excluded:
                        self.sessions.add(session)
                    found.append(process)
                elif session in self.sessions:
                    found.append(process)
        return found

    def left_after(self, timeout: float) -> list[str]:
        """The job's processes still there after up to ``timeout`` seconds (described)."""
        deadline = time.monotonic() + timeout
        left = self.look()
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = self.look()
        return described(left)

    def kill(self) -> None:
        for process in self.look():
            with contextlib.suppress(psutil.Error):
                process.kill()


def described(processes: list[psutil.Process]) -> list[str]:
    out = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            out.append(f"{process.pid} {' '.join(process.cmdline())[:80]}")
    return out


def submit(cluster: SlurmCluster, tmp_path: Path, items: int, types: tuple[str, ...] = HETJOB,
           pipeline: str = PIPELINE, **env: str) -> tuple[str, Path, Path]:
    plan = plan_on(read_live(), *types)
    plan.save(tmp_path / "plan.json")
    (tmp_path / "in.jsonl").write_text("".join(f"{i}\n" for i in range(items)))
    done = fitwork("deploy", "slurm", str(tmp_path / "plan.json"), "-o", str(tmp_path / "job"),
                   "--pipeline", pipeline, "--input", str(tmp_path / "in.jsonl"),
                   "--output", str(tmp_path / "out.jsonl"), env=cluster.env)
    assert done.returncode == 0, done.stderr
    sent = subprocess.run(["sbatch", "--parsable", str(tmp_path / "job" / "fitwork.sbatch")],
                          capture_output=True, text=True, env=job_env(cluster, **env),
                          timeout=30, cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    job = sent.stdout.strip().split(";")[0]
    return job, tmp_path / "job" / f"fitwork-{job}.out", tmp_path / "out.jsonl"


def wait_gone(cluster: SlurmCluster, job: str, timeout: float,
              watch: JobWatch | None = None) -> None:
    """Wait until the job has left the queue (looking at its processes meanwhile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if watch is not None:
            watch.look()
        queued = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True,
                                env=cluster.env, timeout=10)
        if not queued.stdout.strip():
            return
        time.sleep(0.5)
    pytest.fail(f"job {job} still queued after {timeout:g} s; slurmctld log: "
                f"{cluster.log('slurmctld.log')[-1500:]}")


def test_fleet_slurm_reads_the_controller_back(slurm: SlurmCluster, tmp_path: Path) -> None:
    done = fitwork("fleet", "slurm", "-o", str(tmp_path / "fleet.yaml"), env=slurm.env)
    assert done.returncode == 0, done.stderr
    fleet = Fleet.from_yaml(tmp_path / "fleet.yaml")
    assert {n.name: (n.count, n.cores, n.memory, n.devices) for n in fleet.node_types} == {
        "fw-h100": (1, 4, 3000 * 2**20, {"H100-SXM": 2}),
        "fw-h100-v100": (1, 4, 3000 * 2**20, {"H100-SXM": 1, "V100": 1}),  # both GRES types
        "fw-cpu": (2, 4, 3000 * 2**20, {}),
    }


PROBE = """
import ray
ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
print(sorted(ray.cluster_resources()))
"""


def probe_env(token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    return env


def refused(address: str, token: str, timeout: float = 150) -> str:
    """What the GCS answers a Ray client joining with ``token``: the client retries a
    refusal for a while, so the first refusal it logs is the answer ("" if none came)."""
    with tempfile.TemporaryFile("w+") as errors:
        client = subprocess.Popen([sys.executable, "-c", f"ray_address = {address!r}\n{PROBE}"],
                                  env=probe_env(token), stdout=subprocess.DEVNULL,
                                  stderr=errors, text=True)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                errors.seek(0)
                said = re.search(r".*(Unauthenticated|InvalidAuthToken).*", errors.read())
                if said or client.poll() is not None:
                    assert client.poll() in (None, 1), client.returncode  # never joined
                    return said.group(0) if said else ""
                time.sleep(0.5)
            return ""
        finally:
            client.kill()
            client.wait()


def joins(address: str, token: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    """A Ray client joining the job's cluster with ``token``."""
    return subprocess.run([sys.executable, "-c", f"ray_address = {address!r}\n{PROBE}"],
                          env=probe_env(token), capture_output=True, text=True,
                          timeout=timeout)


def check_auth(watch: JobWatch, ray_nodes_expected: int, device_class: str) -> None:
    """The running job's Ray is in token mode with one token, kept in 0600 files in 0700
    folders and on no command line; a client with another token is refused, one with the
    job's token joins."""
    processes = watch.look()
    ray_nodes = [p for p in processes if "FITWORK_RAY_NODE" in environ(p)]
    assert ray_nodes, described(processes)
    base = Path(f"/tmp/fwr-{watch.job}")
    assert base.stat().st_mode & 0o777 == 0o700 and base.stat().st_uid == os.getuid()
    tokens, address = set(), ""
    for process in ray_nodes:
        env = environ(process)
        assert env.get("RAY_AUTH_MODE") == "token", described([process])
        assert "RAY_AUTH_TOKEN" not in env and "FITWORK_RAY_TOKEN" not in env
        token_file = Path(env["RAY_AUTH_TOKEN_PATH"])
        assert token_file.parent == base / "auth"
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert token_file.parent.stat().st_mode & 0o777 == 0o700
        assert token_file.stat().st_uid == os.getuid()
        tokens.add(token_file.read_text())
        address = address or env.get("RAY_ADDRESS", "")
    assert len(tokens) == 1, tokens
    token = tokens.pop()
    assert len(token) == 64
    nodes = {environ(p)["FITWORK_RAY_NODE"] for p in ray_nodes}
    assert len(nodes) == ray_nodes_expected, nodes  # the head and a worker per Slurm node
    for process in processes:
        with contextlib.suppress(psutil.Error):
            assert token not in " ".join(process.cmdline()), described([process])
    assert "InvalidAuthToken" in refused(address, "0" * 64)
    joined = joins(address, token)
    assert joined.returncode == 0, joined.stderr[-2000:]
    assert device_class in joined.stdout, joined.stdout


def ready_nodes(types: tuple[str, ...]) -> list[str]:
    """The line `fitwork.orchestrate.wait` prints for the plan's Ray nodes, one per node."""
    lines = []
    for shape in plan_shapes(plan_on(read_live(), *types)):
        amounts = {"CPU": float(shape.cores), **{c: float(n) for c, n in shape.slots.items()}}
        if shape.device_slots:
            amounts["GPU"] = float(shape.device_slots)
        lines += [f"{shape.name} {dict(sorted(amounts.items()))}"] * shape.nodes
    return sorted(lines)


def check_finished(job: str, text: str, out: Path, items: int, types: tuple[str, ...],
                   watch: JobWatch, leftover: list[str]) -> None:
    """The job ran the plan on the planned Ray nodes, wrote every output once, and left no
    process, token or folder behind."""
    assert "fitwork: ray stopped; job exit 0" in text, text[-4000:]
    assert "Unauthenticated" not in text and "InvalidAuthToken" not in text, text[-4000:]
    assert "still there" not in text, text[-4000:]
    assert "ended before its nodes joined" not in text and "during the run" not in text
    outputs = sorted(json.loads(line) for line in out.read_text().splitlines())
    assert outputs == [3 * x + 1 for x in range(items)]  # every item, exactly once
    ready = re.search(r"ray nodes ready: (.*)", text)
    assert ready is not None, text[-3000:]
    assert ready.group(1).split("; ") == ready_nodes(types)
    nodes = len(ready_nodes(types))
    assert len(watch.sessions) >= 2 + nodes  # the batch step's, the head's, each worker's
    assert leftover == []  # no process of the job, Ray's agents included
    assert not Path(f"/tmp/fwr-{job}").exists()  # nor its token


def test_the_hetjob_runs_the_plan_on_ray_and_stops_it(slurm: SlurmCluster,
                                                       tmp_path: Path) -> None:
    assert [s.nodes for s in plan_shapes(plan_on(read_live(), *HETJOB))] == [1, 2]
    job, log, out = submit(slurm, tmp_path, 200)
    watch = JobWatch(slurm, job)
    try:
        wait_gone(slurm, job, 150, watch)
        leftover = watch.left_after(10)
    finally:
        watch.kill()
    text = log.read_text() if log.exists() else ""
    assert "#SBATCH hetjob" in (tmp_path / "job" / "fitwork.sbatch").read_text()
    check_finished(job, text, out, 200, HETJOB, watch, leftover)


def wait_ready(log: Path, watch: JobWatch, timeout: float = 120) -> None:
    """Wait until the job's log says every planned Ray node has joined."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (
            log.exists() and "ray nodes ready" in log.read_text()):
        watch.look()
        time.sleep(0.5)
    assert log.exists() and "ray nodes ready" in log.read_text(), \
        log.read_text()[-3000:] if log.exists() else "no job log"


def test_a_plan_of_one_node_type_on_a_node_of_two_gpu_types_runs(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    types = ("fw-h100-v100",)
    gate = tmp_path / "gate"
    job, log, out = submit(slurm, tmp_path, 300, types, GATED, FITWORK_TEST_GATE=str(gate))
    script = (tmp_path / "job" / "fitwork.sbatch").read_text()
    assert "hetjob" not in script and "--het-group" not in script
    assert "#SBATCH --constraint=gpu&h100&v100" in script
    watch = JobWatch(slurm, job)
    try:
        wait_ready(log, watch)
        shape, = plan_shapes(plan_on(read_live(), *types))
        device_class, = shape.slots
        check_auth(watch, 2, device_class)  # the head and the node's worker, token mode
        gate.touch()  # the run may end now
        wait_gone(slurm, job, 120, watch)
        leftover = watch.left_after(10)
    finally:
        gate.touch()
        watch.kill()
    text = log.read_text() if log.exists() else ""
    check_finished(job, text, out, 300, types, watch, leftover)


FAILING_RAY = """#!/bin/bash
if [ "${SLURMD_NODENAME:-}" = fwcpu2 ] && [ "${1:-}" = start ]; then
    echo "fake ray: no Ray can start on fwcpu2" >&2
    exit 3
fi
exec %s "$@"
"""


def test_a_failing_worker_step_stops_the_job_at_once_and_says_why(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    ray = tmp_path / "ray"
    ray.write_text(FAILING_RAY % shlex.quote(str(Path(sys.executable).parent / "ray")))
    ray.chmod(0o755)
    began = time.monotonic()
    job, log, out = submit(slurm, tmp_path, 200, RAY_BIN=str(ray))
    watch = JobWatch(slurm, job)
    try:
        wait_gone(slurm, job, 120, watch)
        took = time.monotonic() - began
        leftover = watch.left_after(10)
    finally:
        watch.kill()
    text = log.read_text() if log.exists() else ""
    said = re.search(r"fitwork: the Ray worker step of node type fw-cpu \(component 1, 2 "
                     r"node\(s\)\) ended before its nodes joined: ray worker on fwcpu2 "
                     r"ended \(exit 3\); stopping the job\. Its last output:\n(.*\n){0,5}",
                     text)
    assert said is not None, text[-4000:]
    assert "fake ray: no Ray can start on fwcpu2" in said.group(0), said.group(0)
    assert "fitwork: ray stopped; job exit 1" in text, text[-4000:]
    assert "ray nodes ready" not in text and not out.exists()
    assert took < 90, took  # not the 300 s the nodes' wait allows
    assert leftover == []
    assert not Path(f"/tmp/fwr-{job}").exists()


def test_a_cancelled_job_leaves_no_ray_behind(slurm: SlurmCluster, tmp_path: Path) -> None:
    job, log, _ = submit(slurm, tmp_path, 100_000)
    watch = JobWatch(slurm, job)
    try:
        wait_ready(log, watch)
        check_auth(watch, 4, "H100-SXM")  # while the pipeline runs
        running = len(watch.look())
        subprocess.run(["scancel", job], env=slurm.env, timeout=30, check=True)
        wait_gone(slurm, job, 90, watch)
        leftover = watch.left_after(15)
    finally:
        subprocess.run(["scancel", job], env=slurm.env, timeout=30, check=False)
        watch.kill()
    assert running > 10  # what is looked at: the job's steps and every Ray process
    assert leftover == []
    assert "fitwork: ray stopped; job exit 143" in log.read_text()
    assert "still there" not in log.read_text()
    assert not Path(f"/tmp/fwr-{job}").exists()
