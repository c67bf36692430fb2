"""CLI: ``fitwork fleet k8s|slurm`` read a cluster; ``fitwork deploy k8s|slurm`` write a plan."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
import yaml

from fitwork.commands.options import chosen
from fitwork.errors import FitworkError
from fitwork.orchestrate.cluster import ClusterError, ClusterFleet

if TYPE_CHECKING:
    from fitwork.orchestrate.kuberay import Gang

GANGS: tuple[Gang, ...] = ("volcano", "kueue")

_NODES_HELP = {
    "k8s": "The JSON of `kubectl get nodes -o json` [default: the live cluster of the current "
           "kubeconfig context, read-only; needs fitwork[k8s]].",
    "slurm": "The output of `scontrol show node --json`, `sinfo --json` or `scontrol show "
             "node -o` [default: ask the controller].",
}


def _fail(message: object) -> NoReturn:
    """One line on stderr, as the rest of the CLI prints errors, and exit 1."""
    from rich.console import Console

    Console(stderr=True).print(f"error: {message}", soft_wrap=True, highlight=False,
                               markup=False, style="red")
    sys.exit(1)


def _read(path: Path, what: str, text: bool = False) -> Any:
    """A file's parsed JSON/YAML (or its text); a `ClusterError` naming it otherwise."""
    try:
        content = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ClusterError(f"{what} {path}: cannot read: "
                           f"{(exc.strerror or str(exc)).lower()}") from None
    if text and not content.lstrip().startswith(("{", "[")):
        return content
    try:
        return yaml.safe_load(content)
    except yaml.YAMLError as exc:
        raise ClusterError(f"{what} {path}: not JSON or YAML: "
                           f"{' '.join(str(exc).split())[:200]}") from None


def k8s_cluster(nodes: Path | None, slices: Path | None, tolerate: tuple[str, ...],
                name: str | None) -> ClusterFleet:
    """The Kubernetes cluster from files, or the live one."""
    from fitwork.orchestrate.k8s_fleet import read_k8s, read_live

    if nodes is None:
        if slices is not None:
            raise ClusterError("--slices goes with --nodes (a live cluster's ResourceSlices "
                               "are read from the cluster)")
        return read_live(name, tolerate)
    slice_doc = _read(slices, "slices") if slices else None
    return read_k8s(_read(nodes, "nodes"), slice_doc, name=name or nodes.stem,
                    tolerate=tolerate, place=f"nodes {nodes}")


def slurm_cluster(nodes: Path | None, name: str | None) -> ClusterFleet:
    """The Slurm cluster from a file, or from the controller."""
    from fitwork.orchestrate.slurm_fleet import read_live, read_slurm

    if nodes is None:
        return read_live(name or "slurm")
    return read_slurm(_read(nodes, "nodes", text=True), name or nodes.stem,
                      place=f"nodes {nodes}")


def _show(read: Callable[[], ClusterFleet], output_path: Path | None) -> None:
    from rich.console import Console

    from fitwork.hardware.render import render_fleet

    console = Console()
    try:
        cluster = read()
        found = cluster.fleet()
    except FitworkError as exc:
        _fail(exc)
    console.print(render_fleet(found))
    for note in cluster.notes():
        console.print(note, markup=False, soft_wrap=True)
    if output_path:
        output_path.write_text(found.to_yaml())
        console.print(f"wrote {output_path}", markup=False)


_OUTPUT = click.option("--output", "-o", "output_path", type=click.Path(path_type=Path),
                       help="Also write the fleet as YAML here (for `fitwork plan --fleet`).")
_NAME = click.option("--name", help="The fleet's name [default: the file's or context's].")
_SLICES = click.option("--slices", type=click.Path(path_type=Path),
                       help="With --nodes: the JSON of `kubectl get resourceslices -o json` "
                            "(DRA devices per node).")
_TOLERATE = click.option("--tolerate", multiple=True, metavar="KEY",
                         help="Keep nodes tainted with KEY (and tolerate it); GPU taints "
                              "(nvidia.com/gpu, amd.com/gpu) always are. Repeatable.")


@click.command("k8s")
@click.option("--nodes", type=click.Path(path_type=Path), help=_NODES_HELP["k8s"])
@_SLICES
@_TOLERATE
@_NAME
@_OUTPUT
def fleet_k8s(nodes: Path | None, slices: Path | None, tolerate: tuple[str, ...],
              name: str | None, output_path: Path | None) -> None:
    """A Kubernetes cluster's schedulable nodes, grouped into node types."""
    _show(lambda: k8s_cluster(nodes, slices, tolerate, name), output_path)


@click.command("slurm")
@click.option("--nodes", type=click.Path(path_type=Path), help=_NODES_HELP["slurm"])
@_NAME
@_OUTPUT
def fleet_slurm(nodes: Path | None, name: str | None, output_path: Path | None) -> None:
    """A Slurm cluster's usable nodes, grouped into node types."""
    _show(lambda: slurm_cluster(nodes, name), output_path)


@click.group()
def deploy() -> None:
    """Write a plan for an orchestrator: KubeRay manifests, or an sbatch script."""


_PLAN = click.argument("plan_path", metavar="PLAN", type=click.Path(path_type=Path))
_DIR = click.option("--out-dir", "-o", "out_dir", required=True,
                    type=click.Path(path_type=Path, file_okay=False),
                    help="The folder to write into (created).")


def _run_option_list(required: bool) -> list[Callable[..., Any]]:
    return [
        click.option("--pipeline", "pipeline_ref", required=required,
                     metavar="MODULE_OR_FILE:PIPELINE",
                     help="The pipeline the job runs, as `fitwork run` takes it."),
        click.option("--input", "input_path", required=required,
                     help="The job's input, as the job's nodes see it."),
        click.option("--output", "output_path", required=required,
                     help="The job's output, as the job's nodes see it."),
    ]


_RUN = _run_option_list(required=True)


def _run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_RUN):
        command = option(command)
    return command


def _optional_run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The run options, not required (``deploy k8s --jobs`` takes them from the jobs file)."""
    for option in reversed(_run_option_list(required=False)):
        command = option(command)
    return command


def _plan(path: Path) -> Any:
    from fitwork.fit.plan import Plan

    return Plan.load(path)


def _report(plan: Any, written: list[Path], then: str) -> None:
    from rich.console import Console

    from fitwork.orchestrate.shape import plan_shapes, summary

    console = Console()
    for path in written:
        console.print(f"wrote {path}", markup=False, soft_wrap=True)
    for line in summary(plan, plan_shapes(plan)):
        console.print(line, markup=False, soft_wrap=True)
    console.print(then, markup=False, soft_wrap=True)


def _write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable and writable by this user only (a file already there
    is narrowed to that before it is written; a link is refused)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        os.fchmod(fd, 0o600)
        file.write(text)


@deploy.command("k8s")
@_PLAN
@_DIR
@_optional_run_options
@click.option("--jobs", "jobs_path", type=click.Path(path_type=Path), metavar="JOBS.yaml",
              help="PLAN is the fleet plan of this jobs file (`fitwork plan --jobs`): write a "
                   "Kueue ClusterQueue and LocalQueue per team, a ResourceFlavor per device "
                   "class and each job's RayJob in its team's queue.")
@click.option("--image", default=None, help="An image with fitwork, Ray and the pipeline "
              "[default: fitwork:VERSION].")
@click.option("--dra", is_flag=True, help="Ask for GPUs with DRA ResourceClaimTemplates "
              "(resource.k8s.io/v1) instead of device-plugin resources.")
@click.option("--queue", help="The queue: Kueue's LocalQueue (kueue.x-k8s.io/queue-name), or "
              "Volcano's queue with --gang volcano.")
@click.option("--gang", type=click.Choice(GANGS),
              help="Gang-schedule the whole cluster with Volcano, or admit it whole with Kueue.")
@click.option("--name", help="The RayCluster's name [default: fitwork-PIPELINE].")
@click.option("--namespace", help="The namespace of every object [default: kubectl's].")
@click.option("--nodes", type=click.Path(path_type=Path), help=_NODES_HELP["k8s"])
@_SLICES
@_TOLERATE
def deploy_k8s(plan_path: Path, out_dir: Path, pipeline_ref: str | None,
               input_path: str | None, output_path: str | None, jobs_path: Path | None,
               image: str | None, dra: bool, queue: str | None,
               gang: str | None, name: str | None, namespace: str | None,
               nodes: Path | None, slices: Path | None, tolerate: tuple[str, ...]) -> None:
    """Write PLAN as a KubeRay RayCluster and RayJob (checked against the cluster); with
    --jobs, a fleet plan as Kueue queues and a RayJob per job."""
    from fitwork.orchestrate.kuberay import JobSpec, k8s_name, manifests
    from fitwork.version import __version__

    if jobs_path is not None:
        given = [f for f, v in (("--pipeline", pipeline_ref), ("--input", input_path),
                                ("--output", output_path), ("--queue", queue),
                                ("--gang", gang), ("--dra", dra)) if v]
        if given:
            _fail(f"{', '.join(given)}: not with --jobs (each job's pipeline, input and output "
                  "come from the jobs file, its queue is its team's); drop them")
        _deploy_jobs(plan_path, jobs_path, out_dir, image or f"fitwork:{__version__}",
                     name, namespace, lambda: k8s_cluster(nodes, slices, tolerate, None))
        return
    missing = [f for f, v in (("--pipeline", pipeline_ref), ("--input", input_path),
                              ("--output", output_path)) if not v]
    if missing:
        raise click.UsageError(f"Missing option '{missing[0]}' (or give --jobs JOBS.yaml with "
                               "a fleet plan).")
    assert pipeline_ref and input_path and output_path
    try:
        plan = _plan(plan_path)
        cluster = k8s_cluster(nodes, slices, tolerate, None)
        spec = JobSpec(pipeline=pipeline_ref, input=input_path, output=output_path,
                       image=image or f"fitwork:{__version__}",
                       name=k8s_name(name or f"fitwork-{plan.pipeline}"), namespace=namespace,
                       queue=queue, gang=None if gang is None else chosen(gang, GANGS),
                       dra=dra)
        objects = manifests(plan, cluster, spec)
    except FitworkError as exc:
        _fail(exc)
    written = _write_objects(out_dir, objects)
    _report(plan, written, f"apply with: kubectl apply {' '.join(f'-f {p}' for p in written)}")


def _write_objects(out_dir: Path, objects: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """Each kind's objects in ``NN-KIND.yaml`` (Secrets readable by this user only)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for index, (kind, items) in enumerate(objects.items(), start=1):
        path = out_dir / f"{index:02d}-{kind}.yaml"
        text = yaml.safe_dump_all(items, sort_keys=False)
        try:
            if kind in ("secret", "secrets"):
                _write_private(path, text)
            else:
                path.write_text(text)
        except OSError as exc:
            _fail(f"{path}: cannot write: {(exc.strerror or str(exc)).lower()}")
        written.append(path)
    return written


def _deploy_jobs(plan_path: Path, jobs_path: Path, out_dir: Path, image: str,
                 name: str | None, namespace: str | None,
                 read_cluster: Callable[[], ClusterFleet]) -> None:
    """``deploy k8s --jobs``: the fleet plan as Kueue queues and each job's RayJob."""
    from rich.console import Console

    from fitwork.jobs.plan import FleetPlan
    from fitwork.jobs.spec import load_jobs
    from fitwork.orchestrate.kuberay import k8s_name
    from fitwork.orchestrate.kueue import Target, fleet_manifests

    try:
        jobs = load_jobs(jobs_path)
        plan = FleetPlan.load(plan_path)
        target = Target(image=image, prefix=k8s_name(name or "fitwork", 40),
                        namespace=namespace, runs=_runs(jobs_path, [j.name for j in jobs.jobs]))
        written = fleet_manifests(plan, read_cluster(), target)
    except FitworkError as exc:
        _fail(exc)
    paths = _write_objects(out_dir, written.objects)
    console, errors = Console(), Console(stderr=True)
    for path in paths:
        console.print(f"wrote {path}", markup=False, soft_wrap=True)
    for note in written.notes:
        errors.print(note, markup=False, soft_wrap=True, highlight=False)
    for team, flavors in written.quotas.items():
        quota = "; ".join(f"{f}: " + ", ".join(f"{k} {v:,.4g}" if k != "memory" else
                                               f"memory {v / 2**30:,.1f} GiB"
                                               for k, v in amounts.items())
                          for f, amounts in flavors.items())
        console.print(f"team {team} nominal quota: {quota}", markup=False, soft_wrap=True)
    console.print(f"apply with: kubectl apply {' '.join(f'-f {p}' for p in paths)} "
                  "(Kueue with its RayJob integration on)", markup=False, soft_wrap=True)


def _runs(jobs_path: Path, names: list[str]) -> dict[str, tuple[str, str, str]]:
    """Each job's pipeline, input and output as the jobs file writes them (relative paths
    are the job's: resolved in its pods' working directory)."""
    raw = yaml.safe_load(jobs_path.read_text(encoding="utf-8"))
    entries = {str(e["name"]): e for e in raw["jobs"]}
    return {n: (str(entries[n]["pipeline"]), str(entries[n]["input"]),
                str(entries[n]["output"])) for n in names}


@deploy.command("slurm")
@_PLAN
@_DIR
@_run_options
@click.option("--time", "time_limit", help="The job's time limit (sbatch --time).")
@click.option("--account", help="The account to charge (sbatch --account).")
@click.option("--nodes", type=click.Path(path_type=Path), help=_NODES_HELP["slurm"])
def deploy_slurm(plan_path: Path, out_dir: Path, pipeline_ref: str, input_path: str,
                 output_path: str, time_limit: str | None, account: str | None,
                 nodes: Path | None) -> None:
    """Write PLAN as one sbatch heterogeneous job (checked against the cluster)."""
    from fitwork.orchestrate.kuberay import k8s_name
    from fitwork.orchestrate.sbatch import SlurmJob, sbatch_script

    try:
        plan = _plan(plan_path)
        cluster = slurm_cluster(nodes, None)
        target = out_dir.resolve()
        job = SlurmJob(pipeline=pipeline_ref, input=input_path, output=output_path,
                       plan_path=str(target / "plan.json"),
                       name=k8s_name(f"fitwork-{plan.pipeline}"), time=time_limit,
                       account=account, log=str(target / "fitwork-%j.out"))
        script = sbatch_script(plan, cluster, job)
    except FitworkError as exc:
        _fail(exc)
    out_dir.mkdir(parents=True, exist_ok=True)
    if plan_path.resolve() != (target / "plan.json"):
        shutil.copyfile(plan_path, target / "plan.json")
    path = out_dir / "fitwork.sbatch"
    path.write_text(script)
    path.chmod(0o755)
    _report(plan, [target / "plan.json", path], f"submit with: sbatch {path}")
