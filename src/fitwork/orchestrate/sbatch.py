"""A plan as one sbatch script: a heterogeneous job with a component per planned node type.

The batch step (on the first component's first node) starts the Ray head with no CPUs; an
``srun`` step per component starts one Ray worker per node with the node type's label,
cores and devices (the device class as a Ray resource); once every node has joined, the
pipeline runs there with ``fitwork run --engine ray --plan``.  Ray is stopped however the
job ends: the batch script's EXIT trap ends the worker steps, whose own traps stop the
Ray processes of this job on each node (those whose command line names the node's own Ray
directory: /tmp/fwr-JOBID for the head, /tmp/fwr-JOBID/NODENAME for a worker), since Ray's
daemons outlive a job step under ``proctrack/linuxproc``.  A directory per Slurm node keeps
the Ray nodes of several Slurm nodes on one host (a test cluster) from colliding.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from fitwork.fit.plan import Plan
from fitwork.orchestrate.cluster import ClusterFleet, ClusterNodeType
from fitwork.orchestrate.shape import NodeShape, matched

SLURM_MB = 2**20


@dataclass(frozen=True)
class SlurmJob:
    """What the job runs, where the plan lies, and the job's options."""

    pipeline: str
    input: str
    output: str
    plan_path: str
    name: str
    time: str | None = None
    account: str | None = None
    log: str = "fitwork-%j.out"
    wait_timeout: float = 300.0


def _component(shape: NodeShape, node: ClusterNodeType, job: SlurmJob,
               first: bool) -> list[str]:
    """The #SBATCH lines of one component."""
    lines = []
    if first:
        lines += [f"--job-name={job.name}", f"--output={job.log}"]
        if job.time:
            lines.append(f"--time={job.time}")
        if job.account:
            lines.append(f"--account={job.account}")
    if node.partition:
        lines.append(f"--partition={node.partition}")
    memory = math.floor(node.memory / SLURM_MB)
    lines += [f"--nodes={shape.nodes}", "--ntasks-per-node=1",
              f"--cpus-per-task={shape.cores}", f"--mem={memory}"]
    accel = node.accelerators
    if accel is not None and shape.device_slots:
        lines.append(f"--gres={accel.gres or 'gpu'}:{shape.device_slots}")
    if node.features:
        lines.append(f"--constraint={'&'.join(node.features)}")
    return [f"#SBATCH {line}" for line in lines]


FREE_PORT = [
    "free_port() {  # Ray's agents default to one fixed port: two Ray nodes on a host clash",
    "    \"$PYTHON\" -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); "
    "print(s.getsockname()[1])'",
    "}",
]

WORKER = "\n".join(FREE_PORT) + "\n" + r"""
tmp=$1/${SLURMD_NODENAME:-$(hostname)}; shift
stop() {
    pkill -TERM -f -- "$tmp/" 2>/dev/null || true
    sleep 2
    pkill -KILL -f -- "$tmp/" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 143' TERM INT HUP
[ "${1:-}" = --stop ] && exit 0
mkdir -p "$tmp"
"$RAY" start "$@" --temp-dir="$tmp" --dashboard-agent-listen-port="$(free_port)" --block &
wait $!
""".strip("\n")


def sbatch_script(plan: Plan, cluster: ClusterFleet, job: SlurmJob) -> str:
    """The sbatch script for ``plan`` on ``cluster``."""
    pairs = matched(plan, cluster)
    shapes = [shape for shape, _ in pairs]
    header = ["#!/bin/bash", f"# fitwork: plan for pipeline {plan.pipeline!r}, "
              f"{sum(s.nodes for s in shapes)} node(s); one hetjob component per node type"]
    for index, (shape, node) in enumerate(pairs):
        if index:
            header.append("#SBATCH hetjob")
        header.append(f"# component {index}: node type {shape.name} "
                      f"(units {', '.join(shape.units)})")
        header += _component(shape, node, job, index == 0)
    run = ('"$PYTHON" -m fitwork.cli run '
           + shlex.join([job.pipeline, "--input", job.input, "--output", job.output])
           + ' --engine ray --ray-address "$ADDRESS" --plan "$PLAN" --quiet')
    wanted = " ".join(f"{shlex.quote(s.name)}={s.nodes}" for s in shapes)
    body = [
        "set -euo pipefail",
        'PYTHON=${FITWORK_PYTHON:-python3}',
        'RAY=${RAY_BIN:-ray}',
        "export PYTHON RAY",
        f"PLAN=${{FITWORK_PLAN:-{shlex.quote(job.plan_path)}}}",
        'RAY_TMP=/tmp/fwr-${SLURM_JOB_ID}',
        *FREE_PORT,
        'PORT=${FITWORK_RAY_PORT:-$(free_port)}',
        "HEAD_IP=${FITWORK_HEAD_IP:-$(hostname -I | awk '{print $1}')}",
        'ADDRESS=$HEAD_IP:$PORT',
        'export RAY_ADDRESS=$ADDRESS',
        "WORKER=$(cat <<'FITWORK_WORKER'",
        WORKER,
        "FITWORK_WORKER",
        ")",
        "workers=()",
        "stop_ray() {",
        "    pkill -TERM -f -- \"$RAY_TMP/session_\" 2>/dev/null || true",
        "    sleep 2",
        "    pkill -KILL -f -- \"$RAY_TMP/session_\" 2>/dev/null || true",
        "}",
        "cleanup() {",
        "    status=$?",
        "    trap - EXIT TERM INT HUP",
        "    # a step on every node stops that node's Ray (none can start once the job is",
        "    # cancelled: then each worker step's own trap does it)",
        "    stops=()",
        *[line for i, (s, _) in enumerate(pairs) for line in (
            f"    timeout 30 srun --het-group={i} --nodes={s.nodes} --ntasks={s.nodes} "
            "--ntasks-per-node=1 --overlap bash -c \"$WORKER\" fitwork-ray-stop \"$RAY_TMP\" "
            "--stop >/dev/null 2>&1 &", "    stops+=($!)")],
        "    stop_ray",
        "    for pid in \"${stops[@]}\"; do wait \"$pid\" 2>/dev/null || true; done",
        "    for pid in \"${workers[@]}\"; do kill -TERM \"$pid\" 2>/dev/null || true; done",
        "    for _ in $(seq 10); do",
        "        alive=0",
        "        for pid in \"${workers[@]}\"; do kill -0 \"$pid\" 2>/dev/null && alive=1; done",
        "        [ \"$alive\" = 0 ] && break",
        "        sleep 1",
        "    done",
        "    pkill -KILL -f -- \"$RAY_TMP/\" 2>/dev/null || true",
        "    rm -rf \"$RAY_TMP\"",
        "    echo \"fitwork: ray stopped; job exit $status\"",
        "    exit \"$status\"",
        "}",
        "trap cleanup EXIT",
        "trap 'exit 143' TERM INT HUP",
        "",
        "# The Ray head: on this (the batch) node, with no CPUs, so no replica lands on it.",
        '"$RAY" start --head --node-ip-address="$HEAD_IP" --port="$PORT" --num-cpus=0 '
        '--num-gpus=0 --temp-dir="$RAY_TMP" --include-dashboard=false --disable-usage-stats '
        '--dashboard-agent-listen-port="$(free_port)" --ray-client-server-port="$(free_port)"',
        "",
    ]
    for index, (shape, _) in enumerate(pairs):
        params = shape.ray_params()
        args = ["--address=$ADDRESS", f"--num-cpus={params['num-cpus']}",
                f"--num-gpus={params['num-gpus']}", f"--labels={params['labels']}",
                "--disable-usage-stats"]
        quoted = " ".join(a if "$" in a else shlex.quote(a) for a in args)
        if "resources" in params:
            quoted += " " + shlex.quote(f"--resources={params['resources']}")
        env = "" if shape.device_slots else "env -u CUDA_VISIBLE_DEVICES "
        body += [
            f"# node type {shape.name}: {shape.nodes} Ray worker(s), one per node",
            f"srun --het-group={index} --nodes={shape.nodes} --ntasks={shape.nodes} "
            f"--ntasks-per-node=1 --overlap --kill-on-bad-exit=0 "
            f'{env}bash -c "$WORKER" fitwork-ray "$RAY_TMP" {quoted} &',
            "workers+=($!)",
        ]
    body += [
        "",
        f'"$PYTHON" -m fitwork.orchestrate.wait "$ADDRESS" {wanted} '
        f"--timeout {job.wait_timeout:g}",
        run,
    ]
    return "\n".join(header) + "\n\n" + "\n".join(body) + "\n"
