"""A plan as one sbatch script: a component per planned node type (a heterogeneous job
where the plan uses several node types, a plain job where it uses one), with as many nodes
as the plan uses of each.

The batch step (on the first component's first node) starts the Ray head with no CPUs; an
``srun`` step per component starts one Ray worker per node with the node type's label,
cores and devices (each device class as a Ray resource); once every node has joined, the
pipeline runs there with ``fitwork run --engine ray --plan``.  The batch step watches the
worker steps: one that ends before its nodes have joined stops the job at once, naming the
step, the node and its last output; one that ends during the run is reported the same way.

Everything of the job on a host lies in /tmp/fwr-JOBID, a 0700 folder of the user's own
(Ray makes the Ray folders in it, ``head`` and ``node-NODENAME``, world-writable; the
folder keeps others out).  A folder per Slurm node keeps the Ray nodes of several Slurm
nodes on one host (a test cluster) from colliding.

Ray's token authentication is on: the batch step makes a token (256 random bits) and writes
it to a 0600 file in the 0700 folder ``auth``; the head and the driver read that file
(``RAY_AUTH_TOKEN_PATH``).  Each worker step gets the token in its environment from
``srun`` and writes its node's own copy the same way before Ray starts, so no Ray process
holds it in its environment.  The token is never on a command line.

Ray is stopped however the job ends: the batch script's EXIT trap stops the head and ends
the worker steps, whose own traps stop their nodes.  Each Ray node starts in a session of
its own (``setsid``), which every process Ray starts stays in whatever it calls itself
(``ray::DashboardAgent``...), and a node is stopped by its session: TERM, then KILL, until no
process of it is left.  Ray's daemons outlive a job step under ``proctrack/linuxproc``.
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
    gres = _gres(shape, node)
    if gres:
        lines.append(f"--gres={gres}")
    if node.features:
        lines.append(f"--constraint={'&'.join(node.features)}")
    return [f"#SBATCH {line}" for line in lines]


def _gres(shape: NodeShape, node: ClusterNodeType) -> str:
    """The GRES one node of the component asks for: ``gpu:TYPE:N`` per device class the
    plan uses there (a class that several GRES types map to takes from each in turn)."""
    asks = []
    for device_class, wanted in shape.slots.items():
        for accel in node.all_accelerators:
            if wanted > 0 and accel.device_class == device_class:
                take = min(wanted, accel.count)
                asks.append(f"{accel.gres or 'gpu'}:{take}")
                wanted -= take
    return ",".join(asks)


FREE_PORT = [
    "free_port() {  # Ray's agents default to one fixed port: two Ray nodes on a host clash",
    "    \"$PYTHON\" -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); "
    "print(s.getsockname()[1])'",
    "}",
]

SHARED = [
    *FREE_PORT,
    "private_dir() {  # a folder only this user can enter: an existing one must be its own",
    "    mkdir -m 700 -- \"$1\" 2>/dev/null || true",
    "    if [ -L \"$1\" ] || [ ! -d \"$1\" ] || [ ! -O \"$1\" ]; then",
    "        echo \"fitwork: $1 is not a folder of this user's own; remove it and resubmit\" >&2",
    "        return 1",
    "    fi",
    "    chmod 700 -- \"$1\"",
    "}",
    "write_token() {  # $1 (the token) into the file $2, readable by this user only",
    "    rm -f -- \"$2\" && (umask 077 && printf '%s' \"$1\" > \"$2\")",
    "}",
    "in_session() {  # this user's live processes in session $1",
    "    ps -u \"$(id -u)\" -o pid=,sid=,stat= | awk -v s=\"$1\" '$2 == s && $3 !~ /^Z/ "
    "{print $1}'",
    "}",
    "stop_session() {  # every process of session $1 (made at epoch $2), however it titles",
    "    local pids tries age  # itself: TERM, then KILL",
    "    case \"${1:-}\" in ''|*[!0-9]*) return 0 ;; esac",
    "    age=$(ps -o etimes= -p \"$1\" 2>/dev/null | tr -d ' ' || true)",
    "    if [ -n \"$age\" ] && [ $(( $(date +%s) - age )) -gt $(( ${2:-0} + 2 )) ]; then",
    "        return 0  # the leader is a later process: the number is another session's now",
    "    fi",
    "    pids=$(in_session \"$1\")",
    "    [ -n \"$pids\" ] || return 0",
    "    kill -TERM $pids 2>/dev/null || true",
    "    for tries in 1 2 3 4 5 6 7 8 9 10 11 12; do",
    "        sleep 0.5",
    "        pids=$(in_session \"$1\")",
    "        [ -n \"$pids\" ] || return 0",
    "        if [ \"$tries\" -ge 6 ]; then kill -KILL $pids 2>/dev/null || true; fi",
    "    done",
    "    echo \"fitwork: processes of Ray session $1 still there: $pids\" >&2",
    "}",
]

WORKER = "\n".join(SHARED) + "\n" + r"""
base=$1; shift
node=${SLURMD_NODENAME:-$(hostname)}
tmp=$base/node-$node
session=
made=0
role=run
stop() {
    local status=$?
    [ "$role" = run ] && echo "fitwork: ray worker on $node ended (exit $status)" >&2
    [ -n "$session" ] || read -r session made 2>/dev/null < "$tmp.session" || true
    stop_session "$session" "$made"
    if [ ! -L "$base" ] && [ -O "$base" ]; then
        rm -rf -- "$tmp" "$tmp.session" "$base/auth/node-$node"
        rmdir -- "$base/auth" "$base" 2>/dev/null || true
    fi
}
trap stop EXIT
trap 'exit 143' TERM INT HUP
if [ "${1:-}" = --stop ]; then role=stop; exit 0; fi
private_dir "$base" || exit 1
private_dir "$base/auth" || exit 1
write_token "${FITWORK_RAY_TOKEN:?the job gives each worker step the cluster token}" \
    "$base/auth/node-$node" || exit 1
unset FITWORK_RAY_TOKEN RAY_AUTH_TOKEN
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$base/auth/node-$node
made=$(date +%s)
FITWORK_RAY_NODE=$tmp setsid "$RAY" start "$@" --temp-dir="$tmp" \
    --dashboard-agent-listen-port="$(free_port)" --block &
session=$!  # setsid, not a group leader here, makes its own pid the session
echo "$session $made" > "$tmp.session"
wait "$session"
""".strip("\n")


Pairs = list[tuple[NodeShape, ClusterNodeType]]


def _het(pairs: Pairs, index: int) -> str:
    """srun's option for component ``index``: none in a job of one component (srun refuses
    ``--het-group`` outside a heterogeneous job)."""
    return f"--het-group={index} " if len(pairs) > 1 else ""


def _header(plan: Plan, pairs: Pairs, job: SlurmJob) -> list[str]:
    """The shebang, a comment on the plan, and each component's #SBATCH lines."""
    shapes = [shape for shape, _ in pairs]
    kind = "one hetjob component per node type" if len(pairs) > 1 else "one node type"
    header = ["#!/bin/bash", f"# fitwork: plan for pipeline {plan.pipeline!r}, "
              f"{sum(s.nodes for s in shapes)} node(s); {kind}"]
    for index, (shape, node) in enumerate(pairs):
        if index:
            header.append("#SBATCH hetjob")
        header.append(f"# component {index}: node type {shape.name} "
                      f"(units {', '.join(shape.units)})")
        header += _component(shape, node, job, index == 0)
    return header


def _prelude(job: SlurmJob) -> list[str]:
    """Shell options, the job's variables, the shared functions and the worker step's script."""
    return [
        "set -euo pipefail",
        'PYTHON=${FITWORK_PYTHON:-python3}',
        'RAY=${RAY_BIN:-ray}',
        "export PYTHON RAY",
        f"PLAN=${{FITWORK_PLAN:-{shlex.quote(job.plan_path)}}}",
        'RAY_TMP=/tmp/fwr-${SLURM_JOB_ID}',
        *SHARED,
        'PORT=${FITWORK_RAY_PORT:-$(free_port)}',
        "HEAD_IP=${FITWORK_HEAD_IP:-$(hostname -I | awk '{print $1}')}",
        'ADDRESS=$HEAD_IP:$PORT',
        'export RAY_ADDRESS=$ADDRESS',
        "WORKER=$(cat <<'FITWORK_WORKER'",
        WORKER,
        "FITWORK_WORKER",
        ")",
    ]


def _cleanup(pairs: Pairs) -> list[str]:
    """The EXIT trap that stops every Ray node of the job and removes the job's folder."""
    return [
        "workers=()",
        "steps=()",
        "ended=()",
        "runner=",
        "made_tmp=0",
        "head_session=",
        "head_made=0",
        "cleanup() {",
        "    status=$?",
        "    trap - EXIT TERM INT HUP",
        "    # a step on every node stops that node's Ray (none can start once the job is",
        "    # cancelled: then each worker step's own trap does it)",
        "    stops=()",
        *[line for i, (s, _) in enumerate(pairs) for line in (
            f"    timeout 30 srun {_het(pairs, i)}--nodes={s.nodes} --ntasks={s.nodes} "
            "--ntasks-per-node=1 --overlap --export=ALL bash -c \"$WORKER\" fitwork-ray-stop "
            "\"$RAY_TMP\" --stop >/dev/null 2>&1 &", "    stops+=($!)")],
        "    [ -z \"$runner\" ] || kill -TERM \"$runner\" 2>/dev/null || true",
        "    stop_session \"$head_session\" \"$head_made\"",
        "    for pid in \"${stops[@]}\"; do wait \"$pid\" 2>/dev/null || true; done",
        "    for pid in \"${workers[@]}\"; do kill -TERM \"$pid\" 2>/dev/null || true; done",
        "    for _ in $(seq 10); do",
        "        alive=0",
        "        for pid in \"${workers[@]}\"; do kill -0 \"$pid\" 2>/dev/null && alive=1; done",
        "        [ \"$alive\" = 0 ] && break",
        "        sleep 1",
        "    done",
        "    if [ \"$made_tmp\" = 1 ]; then",
        "        for file in \"$RAY_TMP\"/node-*.session; do  # workers on this host",
        "            [ -f \"$file\" ] && read -r session made < \"$file\" && \\",
        "                stop_session \"$session\" \"$made\"",
        "        done",
        "        rm -rf -- \"$RAY_TMP\"",
        "    fi",
        "    echo \"fitwork: ray stopped; job exit $status\"",
        "    exit \"$status\"",
        "}",
        "trap cleanup EXIT",
        "trap 'exit 143' TERM INT HUP",
        "",
    ]


HEAD = [
    "# Ray's token authentication: a fresh token, in a file only this user can read; the",
    "# head and the driver read the file, each worker step gets the token from srun",
    "private_dir \"$RAY_TMP\"",
    "made_tmp=1",
    "private_dir \"$RAY_TMP/auth\"",
    "token=$(od -An -v -tx1 -N32 /dev/urandom | tr -d ' \\n')",
    "if [ \"${#token}\" != 64 ]; then",
    "    echo \"fitwork: could not make a Ray token from /dev/urandom\" >&2",
    "    exit 1",
    "fi",
    "write_token \"$token\" \"$RAY_TMP/auth/head\"",
    "unset RAY_AUTH_TOKEN FITWORK_RAY_TOKEN",
    "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$RAY_TMP/auth/head",
    "",
    "# The Ray head: on this (the batch) node, with no CPUs, so no replica lands on it; in",
    "# a session of its own, by which it is stopped.",
    "head_made=$(date +%s)",
    'FITWORK_RAY_NODE=$RAY_TMP/head setsid "$RAY" start --head --node-ip-address="$HEAD_IP" '
    '--port="$PORT" --num-cpus=0 --num-gpus=0 --temp-dir="$RAY_TMP/head" '
    "--include-dashboard=false --disable-usage-stats "
    '--dashboard-port="$(free_port)" --dashboard-agent-listen-port="$(free_port)" '
    '--ray-client-server-port="$(free_port)" &',
    "head_session=$!",
    'wait "$head_session"',
    "",
]


WATCH = [
    "watch_steps() {  # a worker step that has ended, or a node's Ray in it: say which and",
    "    local i line status  # why; with 'stop' ($1), end the job",
    "    for i in \"${!workers[@]}\"; do",
    "        [ -z \"${ended[$i]:-}\" ] || continue",
    "        line=$(grep -a -m1 '^fitwork: ray worker on ' \"$RAY_TMP/step-$i.log\" "
    "2>/dev/null || true)",
    "        if kill -0 \"${workers[$i]}\" 2>/dev/null; then",
    "            [ -n \"$line\" ] || continue",
    "        else",
    "            status=0",
    "            wait \"${workers[$i]}\" 2>/dev/null || status=$?",
    "            [ -n \"$line\" ] || line=\"srun ended with exit $status\"",
    "        fi",
    "        ended[$i]=1",
    "        sleep 0.2  # the step's last lines on their way through tee",
    "        if [ \"$1\" = stop ]; then",
    "            echo \"fitwork: ${steps[$i]} ended before its nodes joined: ${line#fitwork: };\""
    " \\",
    "                \"stopping the job. Its last output:\" >&2",
    "        else",
    "            echo \"fitwork: ${steps[$i]} ended during the run: ${line#fitwork: }; the run\""
    " \\",
    "                \"goes on with the nodes left. Its last output:\" >&2",
    "        fi",
    "        grep -av '^fitwork: ray worker on ' \"$RAY_TMP/step-$i.log\" 2>/dev/null | "
    "tail -n 5 | \\",
    "            sed 's/^/    /' >&2 || true",
    "        [ \"$1\" != stop ] || exit 1",
    "    done",
    "}",
    "awaited() {  # the exit status of $runner, watching the worker steps meanwhile",
    "    local status=0",
    "    while kill -0 \"$runner\" 2>/dev/null; do watch_steps \"$1\"; sleep 0.5; done",
    "    wait \"$runner\" || status=$?",
    "    runner=",
    "    return \"$status\"",
    "}",
    "",
]


def _workers(pairs: Pairs) -> list[str]:
    """An srun step per component that starts a Ray worker on each of its nodes; each
    step's output goes to the job's log and to a file the batch step watches."""
    lines: list[str] = []
    for index, (shape, _) in enumerate(pairs):
        params = shape.ray_params()
        args = ["--address=$ADDRESS", f"--num-cpus={params['num-cpus']}",
                f"--num-gpus={params['num-gpus']}", f"--labels={params['labels']}",
                "--disable-usage-stats"]
        quoted = " ".join(a if "$" in a else shlex.quote(a) for a in args)
        if "resources" in params:
            quoted += " " + shlex.quote(f"--resources={params['resources']}")
        env = "" if shape.device_slots else "env -u CUDA_VISIBLE_DEVICES "
        where = f"component {index}, " if len(pairs) > 1 else ""
        step = f"the Ray worker step of node type {shape.name} ({where}{shape.nodes} node(s))"
        lines += [
            f"# node type {shape.name}: {shape.nodes} Ray worker(s), one per node",
            f'exec {{out}}> >(tee -a "$RAY_TMP/step-{index}.log")',
            f"FITWORK_RAY_TOKEN=$token srun {_het(pairs, index)}--nodes={shape.nodes} "
            f"--ntasks={shape.nodes} --ntasks-per-node=1 --overlap --kill-on-bad-exit=0 "
            "--export=ALL "
            f'{env}bash -c "$WORKER" fitwork-ray "$RAY_TMP" {quoted} >&"$out" 2>&1 &',
            "workers+=($!)",
            f"steps+=({shlex.quote(step)})",
        ]
    return lines


def _pipeline(pairs: Pairs, job: SlurmJob) -> list[str]:
    """Wait until every planned node has joined, then run the pipeline on the plan; a worker
    step that ends while the nodes join stops the job."""
    wanted = " ".join(f"{shlex.quote(s.name)}={s.nodes}" for s, _ in pairs)
    run = ('"$PYTHON" -m fitwork.cli run '
           + shlex.join([job.pipeline, "--input", job.input, "--output", job.output])
           + ' --engine ray --ray-address "$ADDRESS" --plan "$PLAN" --quiet &')
    return [
        "",
        f'"$PYTHON" -m fitwork.orchestrate.wait "$ADDRESS" {wanted} '
        f"--timeout {job.wait_timeout:g} &",
        "runner=$!",
        "awaited stop",
        "watch_steps stop",
        run,
        "runner=$!",
        "awaited run",
    ]


def sbatch_script(plan: Plan, cluster: ClusterFleet, job: SlurmJob) -> str:
    """The sbatch script for ``plan`` on ``cluster``."""
    pairs = matched(plan, cluster)
    header = _header(plan, pairs, job)
    body = [*_prelude(job), *_cleanup(pairs), *WATCH, *HEAD, *_workers(pairs),
            *_pipeline(pairs, job)]
    return "\n".join(header) + "\n\n" + "\n".join(body) + "\n"
