"""Declaring units and pipelines, and what is refused."""

from __future__ import annotations

import pytest

from fitwork import Kind, Pipeline, Placement, UnitDefinitionError, unit


def test_kinds_are_inferred_and_declared() -> None:
    @unit
    def plain(x):
        return x

    @unit
    def gen(x):
        yield x

    @unit(kind="filter")
    def keep(x):
        return True

    assert (plain.kind, gen.kind, keep.kind) == (Kind.MAP, Kind.FLAT_MAP, Kind.FILTER)
    assert plain(3) == 3


def test_resources_and_batching() -> None:
    @unit(cpu=0.5, gpu=0.25, memory="2GiB", batch_size=16, batch_wait=0.1)
    def model(batch):
        return batch

    assert model.resources.as_dict() == {"cpu": 0.5, "gpu": 0.25, "memory": 2 * 2**30}
    assert model.batch_size == 16 and model.batch_wait == 0.1


def test_async_units_get_io_concurrency() -> None:
    @unit
    async def call(x):
        return x

    assert call.is_async and call.is_io and call.io == 16


@pytest.mark.parametrize("value, expected", [
    (None, 0), (512, 512), ("1KiB", 1024), ("1.5GB", 1_500_000_000), ("64MiB", 64 << 20)])
def test_memory_is_read_by_the_one_byte_parser(value, expected) -> None:
    declared = unit(lambda x: x, name="m", memory=value, device_memory=value)
    assert declared.resources.memory == expected
    assert declared.device_memory == (None if value is None else expected)


def test_bad_declarations_say_what_to_fix() -> None:
    with pytest.raises(UnitDefinitionError, match="unit 'm': memory='lots': expected a number "
                       "of bytes or a size such as 64GiB"):
        unit(lambda x: x, name="m", memory="lots")
    with pytest.raises(UnitDefinitionError, match="device_memory='2 bananas'"):
        unit(lambda x: x, name="m", device_memory="2 bananas")
    with pytest.raises(UnitDefinitionError, match="batch_size must be >= 1"):
        unit(lambda x: x, batch_size=0)
    with pytest.raises(UnitDefinitionError, match="kind='reduce' is not one of"):
        unit(lambda x: x, kind="reduce")
    with pytest.raises(UnitDefinitionError, match="not callable"):
        unit(42)


def test_pipeline_names_must_be_unique_and_workers_known() -> None:
    def a(x):
        return x

    with pytest.raises(UnitDefinitionError, match="must be unique"):
        Pipeline(a, a)
    pipeline = Pipeline(unit(a), unit(a, name="b"), name="p")
    assert pipeline.edges == [(0, 1)]
    assert Placement.declared(pipeline, {"b": 3}).replicas("b") == 3
    with pytest.raises(UnitDefinitionError, match="has no unit 'c'; its units are a, b"):
        Placement.declared(pipeline, {"c": 2})
    with pytest.raises(UnitDefinitionError, match="needs at least one unit"):
        Pipeline()


def test_serial_is_the_reference() -> None:
    pipeline = Pipeline(unit(lambda x: x + 1, name="inc"),
                        unit(lambda x: range(x), name="fan", kind="flat_map"),
                        unit(lambda x: x % 2 == 0, name="even", kind="filter"))
    assert list(pipeline.serial([1, 3])) == [0, 0, 2]


def test_fused_pipeline_is_one_unit_with_the_union_of_demands() -> None:
    pipeline = Pipeline(unit(lambda x: x + 1, name="inc", cpu=1, memory="1GiB"),
                        unit(lambda x: range(x), name="fan", kind="flat_map", gpu=0.5),
                        unit(lambda x: x % 2 == 0, name="even", kind="filter", cpu=0.5))
    fused = pipeline.fused()
    (only,) = fused.units
    assert only.kind is Kind.FLAT_MAP and only.name == "pipeline_fused"
    assert only.resources.cpu == 1 and only.resources.gpu == 0.5
    assert only.resources.memory == 2**30
    assert list(fused.serial([1, 3])) == list(pipeline.serial([1, 3])) == [0, 0, 2]
