"""A replica's resources are what the engine asks for it (a plan's group), recorded as such."""

from __future__ import annotations

from dataclasses import replace

import pytest

import fitwork
from fitwork import Group, Pipeline, Placement, Resources
from fitwork.placement import allot_unit
from tests.engine.units import double, visible_devices


def test_a_groups_resources_are_what_each_replica_asks_averaged_over_its_replicas() -> None:
    declared = Resources(cpu=1.0)
    placement = Placement((
        Group("double", 2, resources=Resources(cpu=0.5)),
        Group("double", 1, device_class="L4", resources=Resources(cpu=1.0, gpu=0.5)),
    ), "plan")
    asked = allot_unit(replace(double, resources=declared), placement).resources
    assert asked.cpu == pytest.approx(2 / 3) and asked.gpu == pytest.approx(0.5 / 3)
    other = replace(double, name="other", resources=declared)
    assert allot_unit(other, placement).resources == declared  # no group: the unit's own
    bare = Placement((Group("double", 2),), "plan")  # groups that carry none: the unit's
    assert allot_unit(replace(double, resources=declared), bare).resources == declared


@pytest.mark.parametrize("engine", ["local", "sim"])
def test_a_planned_run_records_the_cores_its_replicas_asked_for(engine: str) -> None:
    # the unit declares one core; the plan's group asks half a core per replica
    placement = Placement((Group("double", 2, rate=1e6, resources=Resources(cpu=0.5)),),
                          "plan")
    with fitwork.run(Pipeline(double), range(400), engine=engine,
                     placement=placement) as result:
        assert sorted(result) == [2 * x for x in range(400)]
    record = result.record
    (made,) = record.units
    assert made.resources["cpu"] == 0.5 and double.resources.cpu == 1.0
    cpu = next(r for r in record.resources if r.resource == "cpu")
    assert cpu.allocated == pytest.approx(2 * 0.5, rel=0.05)  # replicas x what each asked


def test_a_local_replica_takes_a_gpu_when_its_group_asks_for_one() -> None:
    # the unit declares no GPU; a plan's group on a GPU class asks half of one per replica
    placement = Placement((Group("visible_devices", 2, device_class="L4",
                                 resources=Resources(cpu=1.0, gpu=0.5)),), "plan")
    with fitwork.run(Pipeline(visible_devices), range(40), engine="local",
                     placement=placement, gpus=("0", "1")) as result:
        seen = {gpu for _, gpu in result}
    assert seen == {"0", "1"}  # two replicas, the visible GPUs in turn
    with fitwork.run(Pipeline(visible_devices), range(10), engine="local",
                     gpus=("0", "1")) as result:  # unplanned: the unit's own, no GPU
        assert {gpu for _, gpu in result} == {""}
