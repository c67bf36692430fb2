"""Task replicas on Ray: a one-unit pipeline's frames run as tasks, with the same books."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import fitwork
from fitwork import Pipeline
from fitwork.engine.ray.driver import RayRun
from fitwork.engine.ray.slots import TaskRun
from tests.engine import units as u

pytestmark = pytest.mark.usefixtures("ray_cluster")


def run(pipeline: Pipeline, items: list[Any], **options: Any) -> tuple[list[Any], Any, Any]:
    """Outputs, record and driver of a run with task replicas asked for."""
    with fitwork.run(pipeline, items, engine="ray", task_replicas=True, **options) as result:
        outputs = list(result)
    return outputs, result.record, result._run


def test_every_output_comes_once_and_a_failing_item_fails_alone(tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    outputs, record, driver = run(Pipeline(u.fail_on_sevens), list(range(500)),
                                  workers={"fail_on_sevens": 2}, dead_letter=dead)
    assert isinstance(driver, TaskRun) and len(driver.slots) == 2  # slots, not actors
    assert sorted(outputs) == [x for x in range(500) if x % 7]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert sorted(d["input"] for d in letters) == [x for x in range(500) if x % 7 == 0]
    assert record.status == "completed" and record.items_completed == 500
    (unit,) = record.units
    assert unit.items_in == 500 and unit.busy_s > 0 and unit.cpu_s > 0


def test_a_pipeline_of_several_units_keeps_its_actors() -> None:
    outputs, _, driver = run(Pipeline(u.double, u.multiple_of_three), list(range(60)))
    assert type(driver) is RayRun  # actors, not slots
    assert sorted(outputs) == [2 * x for x in range(60) if (2 * x) % 3 == 0]


def test_a_task_whose_worker_dies_loses_its_frame_not_the_run(tmp_path: Path) -> None:
    marker = str(tmp_path / "died")
    outputs, record, _ = run(Pipeline(u.die_once_on_13), [(x, marker) for x in range(300)])
    assert Path(marker).exists()  # the worker under 13's frame did die
    assert Counter(outputs) == Counter(range(300))  # and every item still came once
    assert record.status == "completed" and record.poisoned == 0


def test_an_item_that_kills_every_worker_it_meets_is_poison(tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    outputs, record, _ = run(Pipeline(u.die_on_13), list(range(60)), dead_letter=dead,
                             max_attempts=3)
    assert sorted(outputs) == [x for x in range(60) if x != 13]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(d["input"], d["kind"]) for d in letters] == [(13, "poison")]
    assert "worker died" in letters[0]["error"]
    assert record.poisoned == 1


def test_a_class_unit_is_built_once_per_worker_process() -> None:
    outputs, _, driver = run(Pipeline(u.Counter), list(range(200)))
    assert isinstance(driver, TaskRun)
    tokens = {token for _, token in outputs}
    pids = [token.split("-")[0] for token in tokens]
    assert sorted(x for x, _ in outputs) == list(range(200))
    assert len(pids) == len(set(pids))  # one instance in each process that served
