"""Fleets: counted node types (cores, memory, devices, network, price), to and from YAML.

A fleet file looks like::

    name: mixed
    node_types:
      - name: gpu-h100
        count: 2
        cores: 208
        memory: 1872GiB
        devices: {H100-SXM: 8}
        network_bandwidth: 200Gbps

Device class names are checked against the catalog (case and aliases forgiven, stored under the
catalog's canonical name). Sizes and rates accept strings ("64GiB", "25Gbps", "10GB/s") and are
held as bytes and bytes per second. A node type without ``price_per_hour`` is priced from the
catalog: its devices' prices plus its cores times its CPU class's per-vCPU price.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fitwork.errors import InputError
from fitwork.hardware.catalog import Catalog, UnknownDeviceClass, catalog
from fitwork.hardware.units import format_bytes, format_rate, parse_bytes, parse_rate
from fitwork.hardware.validation import one_line
from fitwork.resources import Resources

__all__ = ["Fleet", "FleetError", "NodeType", "example_fleet"]

Bytes = Annotated[int, BeforeValidator(parse_bytes), Field(gt=0)]
Rate = Annotated[float, BeforeValidator(parse_rate), Field(gt=0)]


class FleetError(InputError):
    """A fleet file or value that does not describe a valid fleet; one line, with field paths."""


def _catalog_of(info: ValidationInfo) -> Catalog:
    """The catalog passed in the validation context, else the default one."""
    context = info.context if isinstance(info.context, Mapping) else {}
    found = context.get("catalog")
    return found if isinstance(found, Catalog) else catalog()


class NodeType(BaseModel):
    """``count`` identical nodes: vCPUs, memory, accelerators by class, network, hourly price."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    count: int = Field(default=1, gt=0)
    cores: float = Field(gt=0, description="usable vCPUs (hardware threads) per node")
    memory: Bytes = Field(description="bytes of memory per node")
    devices: dict[str, Annotated[int, Field(gt=0)]] = Field(
        default_factory=dict, description="accelerators per node, by catalog class name"
    )
    network_bandwidth: Rate | None = Field(default=None, description="bytes per second per node")
    price_per_hour: float | None = Field(default=None, ge=0, description="USD per node-hour")
    cpu_class: str = Field(default="cpu-x86", description="catalog class of one vCPU")
    discovered_from: dict[str, str] | None = Field(
        default=None, description="where each discovered figure came from, by field name"
    )

    @field_validator("devices")
    @classmethod
    def _devices_are_catalog_accelerators(
        cls, devices: dict[str, int], info: ValidationInfo
    ) -> dict[str, int]:
        """Device names resolved to canonical catalog names; CPU classes are not devices."""
        known = _catalog_of(info)
        resolved: dict[str, int] = {}
        for name, count in devices.items():
            try:
                device = known.get(name)
            except UnknownDeviceClass as exc:
                raise ValueError(str(exc)) from None
            if device.is_cpu:
                raise ValueError(
                    f"{device.name} is a CPU class; give CPUs as cores (and cpu_class), not devices"
                )
            resolved[device.name] = resolved.get(device.name, 0) + count
        return resolved

    @field_validator("cpu_class")
    @classmethod
    def _cpu_class_is_a_cpu(cls, name: str, info: ValidationInfo) -> str:
        """The CPU class resolved to its canonical catalog name; it must be of kind cpu."""
        try:
            device = _catalog_of(info).get(name)
        except UnknownDeviceClass as exc:
            raise ValueError(str(exc)) from None
        if not device.is_cpu:
            raise ValueError(f"{device.name} is a {device.kind} class, not a CPU class")
        return device.name

    def hourly_price(self, known: Catalog | None = None) -> float | None:
        """USD per hour for one node: ``price_per_hour`` if given, else the catalog's.

        The catalog prices an accelerator with its share of the host (see its header), so a
        node with devices costs the sum of its devices' prices, its cores and memory
        included; a node without devices costs ``cores`` times its CPU class's per-vCPU
        price.  ``None`` when a class it needs has no catalog price.
        """
        if self.price_per_hour is not None:
            return self.price_per_hour
        known = known or catalog()
        if not self.devices:
            cpu_price = known.get(self.cpu_class).price_per_hour
            return None if cpu_price is None else self.cores * cpu_price
        total = 0.0
        for name, count in self.devices.items():
            price = known.get(name).price_per_hour
            if price is None:
                return None
            total += count * price
        return total

    def capacity(self) -> Resources:
        """One node's capacity: vCPUs, memory, and its accelerators (``gpu`` counts them all)."""
        return Resources(cpu=self.cores, gpu=float(sum(self.devices.values())),
                         memory=self.memory, devices=dict(self.devices))


class Fleet(BaseModel):
    """A named set of node types: what the fit solver may place units on."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    node_types: list[NodeType] = Field(min_length=1)

    @model_validator(mode="after")
    def _node_type_names_are_unique(self) -> Fleet:
        """Reject two node types with the same name (plans refer to node types by name)."""
        seen: set[str] = set()
        for node in self.node_types:
            if node.name in seen:
                raise ValueError(f"node type name {node.name!r} is used twice")
            seen.add(node.name)
        return self

    @classmethod
    def parse(cls, data: Any, place: str = "fleet", known: Catalog | None = None) -> Fleet:
        """A validated fleet from loaded YAML/JSON data; ``FleetError`` names ``place``."""
        if not isinstance(data, Mapping):
            found = "nothing" if data is None else type(data).__name__
            raise FleetError(f"{place}: expected a mapping with name and node_types, found {found}")
        try:
            return cls.model_validate(data, context={"catalog": known or catalog()})
        except ValidationError as exc:
            raise FleetError(f"{place}: {one_line(exc)}") from None

    @classmethod
    def from_yaml(cls, path: Path | str, known: Catalog | None = None) -> Fleet:
        """The fleet in the YAML file at ``path``; errors read ``fleet PATH: field: problem``."""
        place = f"fleet {path}"
        remake = "fix it, or write one with `fitwork fleet local --output FILE`"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            raise FleetError(f"{place}: cannot read: {reason}") from None
        except UnicodeDecodeError as exc:
            raise FleetError(f"{place}: not UTF-8 text (byte {exc.start + 1}); {remake}"
                             ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise FleetError(f"{place}: not valid YAML: {' '.join(str(exc).split())}; "
                             f"{remake}") from None
        except RecursionError:
            raise FleetError(f"{place}: YAML nested too deeply to read; {remake}") from None
        return cls.parse(data, place, known)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for YAML or JSON; sizes and rates written as "64GiB"/"25Gbps" where exact."""
        data = self.model_dump(mode="json", exclude_none=True)
        for node in data["node_types"]:
            if float(node["cores"]).is_integer():
                node["cores"] = int(node["cores"])
            node["memory"] = format_bytes(node["memory"])
            if "network_bandwidth" in node:
                node["network_bandwidth"] = format_rate(node["network_bandwidth"])
            if not node["devices"]:
                del node["devices"]
        return data

    def to_yaml(self) -> str:
        """The fleet as YAML that ``from_yaml`` reads back to an equal fleet."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    def node_count(self) -> int:
        """Nodes in the fleet, over all node types."""
        return sum(node.count for node in self.node_types)

    def device_counts(self) -> dict[str, int]:
        """Devices in the whole fleet by class name (counts times devices per node)."""
        counts: dict[str, int] = {}
        for node in self.node_types:
            for name, per_node in node.devices.items():
                counts[name] = counts.get(name, 0) + node.count * per_node
        return counts

    def capacity(self) -> Resources:
        """The whole fleet's capacity (every node of every type)."""
        total = Resources()
        for node in self.node_types:
            total = total + node.capacity() * node.count
        return total

    def hourly_price(self, known: Catalog | None = None) -> float | None:
        """USD per hour for the whole fleet; ``None`` when a node type has no known price."""
        total = 0.0
        for node in self.node_types:
            price = node.hourly_price(known)
            if price is None:
                return None
            total += node.count * price
        return total


def example_fleet(name: str = "mixed", known: Catalog | None = None) -> Fleet:
    """An example fleet shipped in ``fitwork/hardware/fleets/NAME.yaml`` ("mixed")."""
    source = resources.files("fitwork.hardware").joinpath("fleets", f"{name}.yaml")
    place = f"fleet {name} (fitwork/hardware/fleets/{name}.yaml)"
    try:
        text = source.read_text(encoding="utf-8")
    except OSError:
        raise FleetError(f"{place}: no such example fleet") from None
    return Fleet.parse(yaml.safe_load(text), place, known)
