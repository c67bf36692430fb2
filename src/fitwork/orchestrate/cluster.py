"""A cluster as an orchestrator shows it: node types, how to select them, what was left out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fitwork.errors import InputError
from fitwork.hardware.catalog import Catalog, catalog
from fitwork.hardware.fleet import Fleet, NodeType


class ClusterError(InputError):
    """A cluster that cannot be read, or that lacks what a plan needs; one line."""


@dataclass(frozen=True)
class DraDevice:
    """How a DRA driver publishes a product: driver, attribute, value (``productName``).

    ``spaces``, when set, is what the value writes for a space (a product known from a node
    label, not from the driver's own ResourceSlice): the attribute is compared with its
    spaces replaced so.
    """

    driver: str
    attribute: str
    value: str
    spaces: str | None = None

    def cel(self) -> str:
        """A CEL expression true for a device of this product."""
        attribute = f"device.attributes[{json.dumps(self.driver)}].{self.attribute}"
        if self.spaces is not None:
            attribute += f".replace(' ', {json.dumps(self.spaces)})"
        return f"device.driver == {json.dumps(self.driver)} && {attribute} == " \
               f"{json.dumps(self.value)}"


@dataclass(frozen=True)
class Accelerators:
    """The accelerators of one node: product as the cluster names it, catalog class, count.

    ``resource`` is the Kubernetes extended resource that counts whole devices
    (``nvidia.com/gpu``) and ``selector`` the node labels that pick the product; ``mig``
    holds MIG slices per profile (``1g.10gb``) and ``mig_resources`` the resource naming
    each; ``gres`` is Slurm's ``gpu:TYPE``.
    """

    product: str
    device_class: str | None
    count: int
    vendor: str = "nvidia"
    resource: str | None = None
    memory: int | None = None
    selector: tuple[tuple[str, str], ...] = ()
    mig: tuple[tuple[str, int], ...] = ()
    mig_resources: tuple[tuple[str, str], ...] = ()
    dra: DraDevice | None = None
    gres: str | None = None
    suggestions: tuple[str, ...] = ()


@dataclass
class ClusterNodeType:
    """``count`` alike nodes of a cluster, and what selects them there.

    ``more_accelerators``: a node's further accelerator products (a Slurm node with GRES of
    several GPU types); ``accelerators`` is the first.
    """

    name: str
    count: int
    cores: float
    memory: int
    accelerators: Accelerators | None = None
    nodes: list[str] = field(default_factory=list)
    selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, str]] = field(default_factory=list)
    partition: str | None = None
    features: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    more_accelerators: tuple[Accelerators, ...] = ()

    @property
    def all_accelerators(self) -> list[Accelerators]:
        """Every accelerator product of its nodes."""
        first = [self.accelerators] if self.accelerators is not None else []
        return first + list(self.more_accelerators)

    @property
    def known(self) -> bool:
        """Whether its accelerators (if any) are all catalog classes."""
        return all(a.device_class is not None for a in self.all_accelerators)

    def node_type(self) -> NodeType:
        """As a fleet's node type (devices by catalog class)."""
        devices: dict[str, int] = {}
        for accel in self.all_accelerators:
            if accel.device_class is not None:
                devices[accel.device_class] = devices.get(accel.device_class, 0) + accel.count
        where = {k: v for k, v in self.sources.items() if v and (k != "devices" or devices)}
        return NodeType(name=self.name, count=self.count, cores=self.cores,
                        memory=self.memory, devices=devices, discovered_from=where or None)

    def describe(self) -> str:
        """"2 x 8 x H100-SXM, 96 cores" style, for error messages."""
        what = f"{self.cores:g} cores"
        for accel in reversed(self.all_accelerators):
            what = f"{accel.count} x {accel.device_class or accel.product}, {what}"
        return f"{self.name} ({self.count} x {what})"


@dataclass
class ClusterFleet:
    """A cluster read as node types, with the nodes left out and why."""

    kind: str
    name: str
    types: list[ClusterNodeType]
    excluded: dict[str, str] = field(default_factory=dict)

    def fleet(self, known: Catalog | None = None) -> Fleet:
        """The usable node types as a fleet (unknown products left out)."""
        usable = [t.node_type() for t in self.types if t.known and t.count > 0]
        if not usable:
            raise ClusterError(f"{self.kind} cluster {self.name!r}: no usable nodes"
                               + (f" ({'; '.join(self.notes())})" if self.notes() else "")
                               + "; nothing to fit to")
        data = {"name": self.name, "node_types": [n.model_dump() for n in usable]}
        return Fleet.parse(data, f"{self.kind} cluster {self.name}", known or catalog())

    def notes(self) -> list[str]:
        """What was left out of the fleet, one line each."""
        lines = []
        if self.excluded:
            shown = ", ".join(f"{n} ({why})" for n, why in sorted(self.excluded.items())[:5])
            more = len(self.excluded) - 5
            lines.append(f"{len(self.excluded)} node(s) left out: {shown}"
                         + (f" and {more} more" if more > 0 else ""))
        for t in self.types:
            for accel in (a for a in t.all_accelerators if a.device_class is None):
                close = ", ".join(accel.suggestions) or "none close"
                lines.append(f"node type {t.name} ({t.count} node(s)) left out: accelerator "
                             f"{accel.product!r} is not in the catalog (closest: "
                             f"{close}); add it to the catalog to plan for it")
        return lines

    def get(self, name: str) -> ClusterNodeType:
        """The node type called ``name``; a `ClusterError` naming what is offered if none."""
        for t in self.types:
            if t.name == name and t.known:
                return t
        raise ClusterError(f"the plan needs node type {name!r}, which {self.kind} cluster "
                           f"{self.name!r} does not offer; it offers "
                           f"{', '.join(t.describe() for t in self.types if t.known) or 'none'}"
                           f"; re-plan for this cluster's fleet (`fitwork fleet {self.kind} "
                           "-o fleet.yaml`)")
