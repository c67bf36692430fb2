"""Fleets: YAML in and out, catalog-checked devices, default prices, one-line errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fitwork.errors import InputError
from fitwork.hardware.catalog import catalog
from fitwork.hardware.fleet import Fleet, FleetError, NodeType, example_fleet


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_example_fleet_mixes_cpu_nodes_and_two_gpu_generations() -> None:
    fleet = example_fleet()
    assert fleet.name == "mixed"
    assert fleet.device_counts() == {"V100": 8, "H100-SXM": 8}
    assert [n.name for n in fleet.node_types if not n.devices] == ["cpu-n2-32"]
    assert fleet.node_count() == 11


def test_yaml_round_trip_gives_an_equal_fleet(tmp_path: Path) -> None:
    fleet = example_fleet()
    path = tmp_path / "again.yaml"
    path.write_text(fleet.to_yaml())
    assert Fleet.from_yaml(path) == fleet
    assert "memory: 128GiB" in fleet.to_yaml()
    assert "network_bandwidth: 200Gbps" in fleet.to_yaml()


def test_sizes_and_rates_are_held_as_bytes(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        name: small
        node_types:
          - {name: a, cores: 4, memory: 16GiB, network_bandwidth: 25Gbps}
          - {name: b, cores: 2.5, memory: 8000000000, network_bandwidth: 10GB/s}
        """,
    )
    a, b = Fleet.from_yaml(path).node_types
    assert (a.memory, a.network_bandwidth, a.count) == (16 * 2**30, 25e9 / 8, 1)
    assert (b.memory, b.network_bandwidth, b.cores) == (8_000_000_000, 10e9, 2.5)


def test_capacity_and_device_counts_total_over_node_types() -> None:
    fleet = example_fleet()
    capacity = fleet.capacity()
    assert capacity.cpu == 8 * 32 + 2 * 32 + 208
    assert capacity.memory == (8 * 128 + 2 * 120 + 1872) * 2**30
    assert capacity.devices["V100"] == 8 and capacity.devices["H100-SXM"] == 8
    assert capacity.gpu == 16


def test_device_names_resolve_to_catalog_names() -> None:
    node = NodeType(
        name="n", cores=8, memory="64GiB", devices={"h100 sxm": 2, "NVIDIA H100 80GB HBM3": 1}
    )
    assert node.devices == {"H100-SXM": 3}


def test_the_default_price_is_the_devices_with_their_host_share_or_the_cores() -> None:
    gpu_node = NodeType(name="n", cores=32, memory="120GiB", devices={"V100": 4})
    v100 = catalog().get("V100")
    assert v100.price_per_hour is not None and v100.host_share_per_hour is not None
    assert gpu_node.hourly_price() == pytest.approx(4 * v100.price_per_hour)
    assert gpu_node.hourly_price() == pytest.approx(4 * (2.48 + 0.38))  # GPU + its host share
    cpu_node = NodeType(name="c", cores=32, memory="120GiB")
    assert cpu_node.hourly_price() == pytest.approx(32 * 0.048)


def test_a_given_price_wins_and_an_unpriced_device_leaves_the_price_unknown() -> None:
    unpriced = NodeType(name="gb300", cores=72, memory="480GiB", devices={"GB300": 4})
    assert unpriced.hourly_price() is None
    priced = unpriced.model_copy(update={"price_per_hour": 60.0})
    assert priced.hourly_price() == 60.0
    assert Fleet(name="f", node_types=[unpriced]).hourly_price() is None


def test_an_arm_node_is_priced_with_the_arm_core_price() -> None:
    node = NodeType(name="arm", cores=64, memory="256GiB", cpu_class="aarch64")
    assert node.cpu_class == "cpu-arm"
    assert node.hourly_price() == pytest.approx(64 * 0.0408)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            """
            name: f
            node_types:
              - {name: a, count: 0, cores: 4, memory: 16GiB}
            """,
            "node_types[0].count: Input should be greater than 0",
        ),
        (
            """
            name: f
            node_types:
              - {name: a, cores: 4, memory: 16GiB}
              - {name: b, cores: 4, memory: 16GiB, devices: {H10: 2}}
            """,
            "node_types[1].devices: unknown device class 'H10'; "
            "did you mean H100-SXM, H100-PCIe, H200?",
        ),
        (
            """
            name: f
            node_types:
              - {name: a, cores: 4, memory: 64 parsecs}
            """,
            "node_types[0].memory: expected a number of bytes or a size such as 64GiB",
        ),
        (
            """
            name: f
            node_types:
              - {name: a, cores: 4, memory: 1GiB, network_bandwidth: fast}
            """,
            "node_types[0].network_bandwidth: expected bytes per second or a rate",
        ),
        (
            """
            name: f
            node_types:
              - {name: a, cores: 4, memory: 1GiB, devices: {V100: 0}}
            """,
            "node_types[0].devices.V100: Input should be greater than 0",
        ),
        (
            """
            name: f
            node_types:
              - {name: a, cores: 4, memory: 1GiB, devices: {cpu-x86: 4}}
            """,
            "node_types[0].devices: cpu-x86 is a CPU class; give CPUs as cores",
        ),
        (
            """
            name: f
            node_types:
              - {name: a, cores: 4, memory: 1GiB, cpu_class: T4}
            """,
            "node_types[0].cpu_class: T4 is a gpu class, not a CPU class",
        ),
        (
            """
            name: f
            node_types:
              - {name: a, cores: 4, memory: 1GiB, gpus: 2}
            """,
            "node_types[0].gpus: Extra inputs are not permitted",
        ),
        (
            """
            name: f
            node_types:
              - {name: a, cores: 4, memory: 1GiB}
              - {name: a, cores: 8, memory: 2GiB}
            """,
            "fleet.yaml: node type name 'a' is used twice",
        ),
        ("name: f\n", "node_types: Field required"),
        ("- just\n- a list\n", "expected a mapping with name and node_types, found list"),
        ("name: [unclosed\n", "not valid YAML: "),
    ],
)
def test_malformed_fleets_fail_on_one_line_with_the_field_path(
    tmp_path: Path, body: str, message: str
) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(FleetError) as caught:
        Fleet.from_yaml(path)
    text = str(caught.value)
    assert text.startswith(f"fleet {path}: ")
    assert message in text
    assert "\n" not in text
    assert isinstance(caught.value, InputError)


def test_every_error_is_reported_on_the_same_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        name: f
        node_types:
          - {name: a, count: -1, cores: 0, memory: 1GiB}
        """,
    )
    with pytest.raises(FleetError) as caught:
        Fleet.from_yaml(path)
    assert str(caught.value) == (
        f"fleet {path}: node_types[0].count: Input should be greater than 0; "
        "node_types[0].cores: Input should be greater than 0"
    )


def test_a_missing_fleet_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match="cannot read: no such file or directory"):
        Fleet.from_yaml(tmp_path / "absent.yaml")


def test_an_unknown_example_fleet_is_named() -> None:
    with pytest.raises(FleetError, match="no such example fleet"):
        example_fleet("nope")


def test_fleet_from_ray_nodes_groups_by_label_and_shape() -> None:
    from fitwork.hardware.ray_fleet import fleet_from_nodes

    cpu = {"Alive": True, "Resources": {"CPU": 16.0, "memory": 64e9}, "Labels": {}}
    gpu = {"Alive": True, "Labels": {"fitwork.node-type": "gpu"},
           "Resources": {"CPU": 32.0, "memory": 256e9, "GPU": 8.0,
                         "accelerator_type:H100": 1.0}}
    dead = {**cpu, "Alive": False}
    fleet = fleet_from_nodes([cpu, cpu, gpu, dead])
    shapes = {n.name: (n.count, n.cores, n.devices) for n in fleet.node_types}
    assert shapes == {"ray-0": (2, 16.0, {}), "gpu": (1, 32.0, {"H100-SXM": 8})}


def test_nodes_of_one_label_are_one_node_type_at_the_least_any_has() -> None:
    """Ray reads each node's free memory as it starts: two nodes of one machine type differ a
    little, and a label names one node type (the engine places by it), so they are one."""
    from fitwork.hardware.ray_fleet import fleet_from_nodes

    def node(cores: float, memory: float, label: str | None = None) -> dict:
        return {"Alive": True, "Resources": {"CPU": cores, "memory": memory},
                "Labels": {"fitwork.node-type": label} if label else {}}

    fleet = fleet_from_nodes([node(4.0, 24.7e9, "cpu"), node(4.0, 24.4e9, "cpu"),
                              node(2.0, 25e9, "cpu"), node(8.0, 9e9), node(8.0, 8e9)])
    shapes = {n.name: (n.count, n.cores, n.memory) for n in fleet.node_types}
    assert shapes == {"cpu": (3, 2.0, int(24.4e9)), "ray-0": (2, 8.0, int(8e9))}
