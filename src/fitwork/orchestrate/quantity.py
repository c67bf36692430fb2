"""Kubernetes resource quantities ("15500m", "64Gi", "1e3") as numbers, and back."""

from __future__ import annotations

import math
import re

from fitwork.errors import InputError

_SUFFIX = {
    "": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]{0,2})$")


def parse_quantity(value: object, place: str = "quantity") -> float:
    """A quantity's value: ``"15500m"`` is 15.5, ``"64Gi"`` is 68719476736.0."""
    if isinstance(value, bool):
        raise InputError(f"{place}: {value!r} is not a Kubernetes quantity; give e.g. 4 or 16Gi")
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if match is None or match.group(2) not in _SUFFIX:
        raise InputError(f"{place}: {value!r} is not a Kubernetes quantity; give e.g. 4, 500m "
                         "or 16Gi")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def cpu_quantity(cores: float) -> str:
    """Cores as a quantity: whole cores plain ("4"), else millicores rounded up ("1500m")."""
    if float(cores).is_integer():
        return str(int(cores))
    return f"{math.ceil(cores * 1000 - 1e-6)}m"


def memory_quantity(count: float) -> str:
    """Bytes as a quantity in the largest binary unit that holds them whole, rounded up to Mi."""
    mib = math.ceil(count / 2**20 - 1e-9)
    if mib % 1024 == 0 and mib:
        return f"{mib // 1024}Gi"
    return f"{mib}Mi"
