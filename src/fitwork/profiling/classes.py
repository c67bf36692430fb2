"""The device classes a profile is measured on: given, or discovered on this host.

A unit runs on the host's CPU class (the catalog class of this machine's architecture:
``cpu-x86``, ``cpu-arm``) unless it holds a GPU share and the host has a GPU: then it is
measured on that GPU's catalog class.  Discovery is `fitwork.hardware.discover`'s
``discover_local`` (NVML, restricted by ``CUDA_VISIBLE_DEVICES``); with several GPU classes
visible, the first visible GPU's (CUDA's device 0) is the one a unit gets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fitwork.errors import InputError
from fitwork.hardware import discover
from fitwork.hardware.catalog import Catalog, catalog
from fitwork.workload.unit import Unit


@dataclass(frozen=True)
class MeasuredOn:
    """The host's CPU class, the accelerator class (``None``: none), and where they came from."""

    host_class: str
    accelerator_class: str | None
    found_from: str

    def of(self, unit: Unit) -> str:
        """The class ``unit`` is measured on here."""
        return self.accelerator_class if self.on_accelerator(unit) else self.host_class

    def on_accelerator(self, unit: Unit) -> bool:
        """Whether ``unit`` runs on the accelerator here (it holds a GPU share, there is one)."""
        return self.accelerator_class is not None and unit.resources.gpu > 0


def measured_on(host_class: str | None = None, accelerator_class: str | None = None, *,
                discover_accelerator: bool = True, known: Catalog | None = None) -> MeasuredOn:
    """The classes given, the others discovered on this host (names as the catalog spells them).

    With ``discover_accelerator`` false, an accelerator class not given is ``None`` without
    asking NVML (no unit needs one).
    """
    known = known or catalog()
    given = []
    if host_class is not None:
        host_class = _checked(host_class, "cpu", known)
        given.append(f"host class {host_class} given")
    if accelerator_class is not None:
        accelerator_class = _checked(accelerator_class, "accelerator", known)
        given.append(f"accelerator class {accelerator_class} given")
    found = []
    if host_class is None or (accelerator_class is None and discover_accelerator):
        node = discover.discover_local(known=known).node_types[0]
        notes = node.discovered_from or {}
        if host_class is None:
            host_class = node.cpu_class
            found.append(f"host class {host_class} discovered "
                         f"({notes.get('cpu_class', 'platform.machine()')})")
        if accelerator_class is None and discover_accelerator:
            accelerator_class = next((name for name, count in node.devices.items() if count),
                                     None)
            found.append(f"accelerator class {accelerator_class or 'none'} discovered "
                         f"({notes.get('devices', 'NVML')})")
    return MeasuredOn(host_class, accelerator_class, "; ".join(given + found))


def _checked(name: str, kind: str, known: Catalog) -> str:
    device = known.get(name)
    if (kind == "cpu") != device.is_cpu:
        wanted = "a CPU class, for the host" if kind == "cpu" else "an accelerator class"
        raise InputError(f"device class {device.name} is not {wanted}")
    return device.name


def split_classes(names: Iterable[str], known: Catalog | None = None
                  ) -> tuple[str | None, str | None]:
    """``--device-class`` values as (host class, accelerator class), each at most once.

    A CPU class names the host's cores; any other class, the accelerator GPU units run on.
    """
    known = known or catalog()
    host: str | None = None
    accelerator: str | None = None
    for name in names:
        device = known.get(name)
        if device.is_cpu:
            if host is not None and host != device.name:
                raise InputError(f"--device-class: two CPU classes, {host} and {device.name}; "
                                 "give one for the host")
            host = device.name
        else:
            if accelerator is not None and accelerator != device.name:
                raise InputError(f"--device-class: two accelerator classes, {accelerator} and "
                                 f"{device.name}; profile on one at a time")
            accelerator = device.name
    return host, accelerator
