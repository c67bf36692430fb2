"""Hardware: the device catalog (data plus thin queries), fleets, and discovery of this host."""

from fitwork.hardware.catalog import (
    Catalog,
    CatalogError,
    DeviceClass,
    DeviceKind,
    UnknownDeviceClass,
    catalog,
    device_kind,
    load_catalog,
)
from fitwork.hardware.discover import discover_local
from fitwork.hardware.fleet import Fleet, FleetError, NodeType, example_fleet

__all__ = [
    "Catalog",
    "CatalogError",
    "DeviceClass",
    "DeviceKind",
    "Fleet",
    "FleetError",
    "NodeType",
    "UnknownDeviceClass",
    "catalog",
    "device_kind",
    "discover_local",
    "example_fleet",
    "load_catalog",
]
