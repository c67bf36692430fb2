"""The Ray engine's entry: a run of actor replicas (`RayRun`) or of task slots (`TaskRun`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fitwork.engine.contract import RunResult
from fitwork.engine.options import RayOptions, RunOptions
from fitwork.engine.ray.driver import RayRun
from fitwork.engine.ray.slots import TaskRun
from fitwork.engine.ray.tasks import eligible
from fitwork.engine.shell import stages_of
from fitwork.placement import Placement
from fitwork.workload.pipeline import Pipeline


class RayEngine:
    """Runs a pipeline as Ray actors, on an existing cluster or one started here."""

    name = "ray"
    options = RayOptions

    def run(self, pipeline: Pipeline, source: Iterable[Any], placement: Placement,
            options: RunOptions, engine_options: RayOptions) -> RunResult:
        """Start the actors and return a result that streams outputs as they come."""
        stages = stages_of(pipeline, placement.check(pipeline))
        tasks = engine_options.task_replicas and eligible(
            list(pipeline.units), stages, options.sink is not None)
        run = TaskRun if tasks else RayRun
        return run(pipeline, source, placement, options, engine_options).start()


__all__ = ["RayEngine"]
