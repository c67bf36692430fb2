"""Slurm nodes read as node types (22.05 JSON and text as this host's Slurm writes them, a
24.11-shaped sinfo, a node with GRES of two GPU types), and `fitwork deploy slurm`'s script
for a plan of several node types (a hetjob) and of one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fitwork.orchestrate.cluster import ClusterError
from fitwork.orchestrate.sbatch import SlurmJob, sbatch_script
from fitwork.orchestrate.shape import plan_shapes
from fitwork.orchestrate.slurm_fleet import parse_gres, read_slurm

from .helpers import DATA, fitwork, plan_on

JOB = SlurmJob(pipeline="tests.orchestrate.slurm_pipeline:pipeline", input="in.jsonl",
               output="out.jsonl", plan_path="/shared/run/plan.json", name="fitwork-placed")


def shapes_of(found):  # type: ignore[no-untyped-def]
    return {t.name: (t.count, t.cores, t.memory // 2**20,
                     t.accelerators and (t.accelerators.device_class, t.accelerators.count,
                                         t.accelerators.gres), t.partition, t.features)
            for t in found.types}


def test_gres_strings() -> None:
    assert parse_gres("gpu:h100:8(S:0-1),shard:4") == [("h100", 8)]
    assert parse_gres("shard:4,gpu:2") == [(None, 2)]
    assert parse_gres("(null)") == []
    assert parse_gres("gpu:a100:4(S:0-1)") == [("a100", 4)]
    assert parse_gres("gpu:h100:2(S:0),gpu:v100:1(S:1),shard:4") == [("h100", 2), ("v100", 1)]
    assert parse_gres("gpu:h100:1,gpu:h100:1") == [("h100", 2)]


MIXED = ("NodeName=fwmix CPUTot=4 AvailableFeatures=gpu,h100,v100 Gres=gpu:h100:1,gpu:v100:1 "
         "RealMemory=3000 State=IDLE Partitions=fw\n"
         "NodeName=fwrtx CPUTot=4 AvailableFeatures=gpu Gres=gpu:h100:1,gpu:rtx6000:1 "
         "RealMemory=3000 State=IDLE Partitions=fw\n"
         "NodeName=fwcpu CPUTot=4 AvailableFeatures=cpu Gres=(null) RealMemory=3000 "
         "State=IDLE Partitions=fw\n")


def test_a_node_with_gres_of_two_gpu_types_keeps_both() -> None:
    found = read_slurm(MIXED)
    mixed = found.get("fw-h100-v100")
    assert mixed.node_type().devices == {"H100-SXM": 1, "V100": 1}
    assert [a.gres for a in mixed.all_accelerators] == ["gpu:h100", "gpu:v100"]
    assert mixed.describe() == "fw-h100-v100 (1 x 1 x H100-SXM, 1 x V100, 4 cores)"
    # one GPU type the catalog lacks: the node type is left out, and the note names it
    assert [n.name for n in found.fleet().node_types] == ["fw-h100-v100", "fw-cpu"]
    assert any("fw-h100-rtx6000" in note and "'rtx6000' is not in the catalog" in note
               for note in found.notes())


@pytest.mark.parametrize("name", ["sinfo-22.05.json", "scontrol-22.05.txt"])
def test_slurm_22_05_json_and_text_give_the_same_node_types(name: str) -> None:
    text = (DATA / name).read_text()
    found = read_slurm(json.loads(text) if name.endswith(".json") else text)
    assert shapes_of(found) == {
        "fw-h100": (1, 4, 3000, ("H100-SXM", 2, "gpu:h100"), "fw", ("gpu", "h100")),
        "fw-cpu": (1, 4, 3000, None, "fw", ("cpu",)),
    }
    assert found.excluded == {}


def test_sinfo_24_11_down_and_drained_nodes_left_out_and_unknown_gres_named() -> None:
    found = read_slurm(json.loads((DATA / "sinfo-24.11.json").read_text()), "big")
    assert shapes_of(found)["gpu-a100"] == (2, 64, 515000, ("A100-40GB", 4, "gpu:a100"),
                                            "gpu", ("a100", "ib"))
    assert shapes_of(found)["cpu-cpu"] == (3, 96, 385000, None, "cpu", ("icelake",))
    assert found.excluded == {"gpu-a03": "state DOWN+NOT_RESPONDING",
                              "cpu-004": "state DRAIN"}
    assert [n.name for n in found.fleet().node_types] == ["gpu-a100", "cpu-cpu"]
    assert any("'rtx6000' is not in the catalog" in note for note in found.notes())


@pytest.fixture(scope="module")
def cluster22():  # type: ignore[no-untyped-def]
    return read_slurm(json.loads((DATA / "sinfo-22.05.json").read_text()))


def test_the_hetjob_has_a_component_per_node_type_and_starts_ray_as_planned(
        cluster22, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = plan_on(cluster22, "fw-h100", "fw-cpu")
    shapes = {s.name: s for s in plan_shapes(plan)}
    script = sbatch_script(plan, cluster22, JOB)
    header = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    components = "\n".join(header).split("#SBATCH hetjob")
    assert len(components) == len(shapes) == 2
    gpu, cpu = components
    slots = shapes["fw-h100"].device_slots
    assert f"#SBATCH --gres=gpu:h100:{slots}" in gpu and "--constraint=gpu&h100" in gpu
    assert "--cpus-per-task=4" in gpu and "--mem=3000" in gpu and "--partition=fw" in gpu
    assert "--gres" not in cpu and "--constraint=cpu" in cpu
    assert f"--nodes={shapes['fw-cpu'].nodes}" in cpu
    starts = [line for line in script.splitlines()
              if line.startswith("FITWORK_RAY_TOKEN=$token srun --het-group=")]
    assert len(starts) == 2
    assert "--labels=fitwork.node-type=fw-h100" in starts[0]
    assert f"'--resources={{\"H100-SXM\": {slots}}}'" in starts[0]
    assert f"--num-gpus={slots}" in starts[0]
    assert "env -u CUDA_VISIBLE_DEVICES" in starts[1] and "--num-gpus=0" in starts[1]
    assert "--labels=fitwork.node-type=fw-cpu" in starts[1]
    assert re.search(r"fitwork\.cli run tests\.orchestrate\.slurm_pipeline:pipeline --input "
                     r"in\.jsonl --output out\.jsonl --engine ray --ray-address \"\$ADDRESS\" "
                     r"--plan \"\$PLAN\"", script)
    assert "trap cleanup EXIT" in script and "--num-cpus=0" in script  # head holds no replica
    assert "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$RAY_TMP/auth/head" in script
    assert script.count('setsid "$RAY" start') == 2  # the head, and the worker of every step
    assert "pkill" not in script  # nothing found by name: Ray's processes retitle themselves
    uses = [line.strip() for line in script.splitlines() if "$token" in line]
    assert uses and all(  # the token reaches no command line: srun's environment, a builtin
        use.startswith("FITWORK_RAY_TOKEN=$token srun ") or use.startswith("if [ \"${#token}")
        or use == 'write_token "$token" "$RAY_TMP/auth/head"' for use in uses), uses
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True,
                          timeout=30).returncode == 0


def test_deploy_slurm_checks_the_plan_against_the_cluster(cluster22, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = plan_on(cluster22, "fw-h100", "fw-cpu")
    other = read_slurm(json.loads((DATA / "sinfo-24.11.json").read_text()), "big")
    with pytest.raises(ClusterError, match="the plan needs node type 'fw-h100', which slurm "
                                           "cluster 'big' does not offer; it offers gpu-a100 "
                                           r"\(2 x 4 x A100-40GB, 64 cores\), cpu-cpu"):
        sbatch_script(plan, other, JOB)
    plan_path = tmp_path / "plan.json"
    plan.save(plan_path)
    done = fitwork("deploy", "slurm", str(plan_path), "-o", str(tmp_path / "job"),
                   "--pipeline", "m:p", "--input", "in", "--output", "out", "--nodes",
                   str(DATA / "sinfo-22.05.json"), "--time", "00:30:00")
    assert done.returncode == 0, done.stderr
    script = (tmp_path / "job" / "fitwork.sbatch").read_text()
    assert "#SBATCH --time=00:30:00" in script
    assert f"PLAN=${{FITWORK_PLAN:-{(tmp_path / 'job' / 'plan.json').resolve()}}}" in script
    assert (tmp_path / "job" / "plan.json").read_text() == plan_path.read_text()
    assert "per hour at the fleet's prices; plan predicts" in done.stdout
    done = fitwork("deploy", "slurm", str(plan_path), "-o", str(tmp_path / "job2"),
                   "--pipeline", "m:p", "--input", "in", "--output", "out", "--nodes",
                   str(DATA / "sinfo-24.11.json"))
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("error: the plan needs node type 'fw-h100'")


def test_fleet_slurm_without_a_controller_gives_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}  # none configured
    done = subprocess.run([sys.executable, "-m", "fitwork.cli", "fleet", "slurm"],
                          capture_output=True, text=True, timeout=90, env=env)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith(("error: cannot read the Slurm controller: ",
                                "error: no Slurm client on this host (sinfo not found)"))


def test_a_plan_of_one_node_type_is_a_plain_job_and_asks_for_each_gpu_type_it_uses(
        tmp_path: Path) -> None:
    found = read_slurm(MIXED)
    plan = plan_on(found, "fw-h100-v100")
    script = sbatch_script(plan, found, JOB)
    assert "#SBATCH hetjob" not in script and "--het-group" not in script  # srun refuses it
    assert "#SBATCH --nodes=1" in script and "#SBATCH --constraint=gpu&h100&v100" in script
    assert len(re.findall(r"^FITWORK_RAY_TOKEN=\$token srun --nodes=1 ", script, re.M)) == 1
    assert "fitwork.orchestrate.wait \"$ADDRESS\" fw-h100-v100=1" in script
    (tmp_path / "one.sbatch").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "one.sbatch")],
                          timeout=30).returncode == 0
    # the same node type with the model placed on both its GPU types: a GRES of each type,
    # and Ray told of both classes
    result = plan.fitted.result
    model = next(p for p in result.replicas if p.unit == "model")
    other = "V100" if model.device_class == "H100-SXM" else "H100-SXM"
    result.replicas.append(model.model_copy(update={"device_class": other}))
    script = sbatch_script(plan, found, JOB)
    assert "#SBATCH --gres=gpu:h100:1,gpu:v100:1" in script
    assert "--num-gpus=2 " in script
    assert """'--resources={"H100-SXM": 1, "V100": 1}'""" in script \
        or """'--resources={"V100": 1, "H100-SXM": 1}'""" in script


def test_the_job_watches_its_worker_steps(cluster22) -> None:  # type: ignore[no-untyped-def]
    script = sbatch_script(plan_on(cluster22, "fw-h100", "fw-cpu"), cluster22, JOB)
    lines = script.splitlines()
    wait = next(i for i, line in enumerate(lines) if "fitwork.orchestrate.wait" in line)
    assert lines[wait].endswith("--timeout 300 &")  # the join, watched, not waited on blindly
    assert lines[wait + 1:wait + 4] == ["runner=$!", "awaited stop", "watch_steps stop"]
    assert lines[wait + 4].startswith('"$PYTHON" -m fitwork.cli run ')
    assert lines[wait + 5:] == ["runner=$!", "awaited run"]
    steps = [line for line in lines if line.startswith("steps+=(")]
    assert steps == ["steps+=('the Ray worker step of node type fw-h100 (component 0, 1 node(s))')",
                     "steps+=('the Ray worker step of node type fw-cpu (component 1, 1 node(s))')"]
    # a worker's Ray that ends says so on the step's output, which the batch step reads
    assert 'echo "fitwork: ray worker on $node ended (exit $status)" >&2' in script
    assert script.count('>(tee -a "$RAY_TMP/step-') == 2
