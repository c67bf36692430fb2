"""Byte sizes ("64GiB") and data rates ("25Gbps", "10GB/s") parsed to numbers and written back."""

from __future__ import annotations

import math
import re

__all__ = [
    "format_bytes",
    "format_rate",
    "human_bytes",
    "human_rate",
    "parse_bytes",
    "parse_rate",
]

_PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_BINARY = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"
_SIZE = re.compile(rf"^{_NUMBER}\s*(?P<unit>[a-zA-Z]*)$")
_RATE = re.compile(rf"^{_NUMBER}\s*(?P<unit>[a-zA-Z]*(?:/s)?)$")

SIZE_FORMS = "a number of bytes or a size such as 64GiB, 512MiB, 2TB, 1.5GB"
RATE_FORMS = "bytes per second or a rate such as 25Gbps, 100Mbit/s, 10GB/s, 1.25GiB/s"


def _multiplier(prefix: str) -> int | None:
    """Bytes in one unit of a size prefix ("", "k", "Mi", "G", ...); ``None`` if unknown."""
    lower = prefix.lower()
    if lower in _BINARY:
        return _BINARY[lower]
    return _PREFIX.get(lower)


def parse_bytes(value: object) -> int:
    """A byte count from an int, a float with no fraction, or a string such as ``"64GiB"``.

    Decimal prefixes (kB, MB, GB, TB) are powers of 1000 and binary ones (KiB, MiB, GiB, TiB)
    powers of 1024; a trailing ``B`` is optional. Raises ``ValueError`` naming the forms
    accepted.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected {SIZE_FORMS}, got {value!r}")
    if isinstance(value, int):
        count = value
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"expected a whole number of bytes, got {value!r}")
        count = int(value)
    elif isinstance(value, str):
        match = _SIZE.match(value.strip())
        unit = match.group("unit") if match else ""
        prefix = unit[:-1] if unit[-1:] in ("B", "b") and unit.lower() not in _BINARY else unit
        multiplier = _multiplier(prefix) if match else None
        if match is None or multiplier is None:
            raise ValueError(f"expected {SIZE_FORMS}, got {value!r}")
        exact = float(match.group("num")) * multiplier
        count = round(exact)
        if abs(exact - count) > 1e-6 * max(1.0, exact):
            raise ValueError(f"{value!r} is not a whole number of bytes")
    else:
        raise ValueError(f"expected {SIZE_FORMS}, got {type(value).__name__}")
    if count < 0:
        raise ValueError(f"a size cannot be negative, got {value!r}")
    return count


def _rate_unit(unit: str) -> float | None:
    """Bytes per second in one ``unit`` ("Gbps", "GB/s", "Mbit/s", "GiB/s", ""); else ``None``.

    A lower-case ``b`` means bits and an upper-case ``B`` bytes, as in ``Gb/s`` against ``GB/s``.
    """
    if unit == "":
        return 1.0
    suffixes = (("bit/s", True), ("bps", True), ("b/s", True), ("Bps", False), ("B/s", False))
    for suffix, bits in suffixes:
        if unit.endswith(suffix):
            multiplier = _multiplier(unit[: -len(suffix)])
            if multiplier is None:
                return None
            return multiplier / 8 if bits else float(multiplier)
    return None


def parse_rate(value: object) -> float:
    """A data rate in bytes per second from a number or a string such as ``"25Gbps"``.

    ``bps``, ``bit/s`` and ``b/s`` count bits (divided by 8); ``B/s`` counts bytes. Prefixes
    are decimal (k, M, G, T) or binary (Ki, Mi, Gi, Ti). Raises ``ValueError`` naming the forms
    accepted.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected {RATE_FORMS}, got {value!r}")
    if isinstance(value, int | float):
        rate = float(value)
    elif isinstance(value, str):
        match = _RATE.match(value.strip())
        per_unit = _rate_unit(match.group("unit")) if match else None
        if match is None or per_unit is None:
            raise ValueError(f"expected {RATE_FORMS}, got {value!r}")
        rate = float(match.group("num")) * per_unit
    else:
        raise ValueError(f"expected {RATE_FORMS}, got {type(value).__name__}")
    if not math.isfinite(rate) or rate < 0:
        raise ValueError(f"a rate must be a finite number >= 0, got {value!r}")
    return rate


def format_bytes(count: int) -> str | int:
    """``count`` written exactly in the largest whole unit ("64GiB", "2TB"), else as an int.

    ``parse_bytes(format_bytes(n)) == n`` for every ``n >= 0``.
    """
    for unit, size in (
        ("TiB", 2**40),
        ("TB", 10**12),
        ("GiB", 2**30),
        ("GB", 10**9),
        ("MiB", 2**20),
        ("MB", 10**6),
    ):
        if count >= size and count % size == 0:
            return f"{count // size}{unit}"
    return count


def format_rate(rate: float) -> str | float:
    """``rate`` (bytes/s) written exactly as "25Gbps" or "10GB/s" where whole, else a float.

    ``parse_rate(format_rate(r)) == r`` for every finite ``r >= 0``.
    """
    bits = rate * 8
    for unit, size in (("Tbps", 10**12), ("Gbps", 10**9), ("Mbps", 10**6)):
        if bits >= size and bits == int(bits) and int(bits) % size == 0:
            return f"{int(bits) // size}{unit}"
    for unit, size in (("TB/s", 10**12), ("GB/s", 10**9), ("MB/s", 10**6)):
        if rate >= size and rate == int(rate) and int(rate) % size == 0:
            return f"{int(rate) // size}{unit}"
    return float(rate)


def human_bytes(count: float) -> str:
    """A byte count for people, in binary units to three significant figures: "23.5 GiB"."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.3g} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    raise AssertionError("unreachable")


def human_rate(rate: float) -> str:
    """A data rate for people in bits per second, decimal units: "25 Gbit/s"."""
    value = float(rate) * 8
    for unit in ("bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"):
        if abs(value) < 1000 or unit == "Tbit/s":
            return f"{value:.3g} {unit}"
        value /= 1000
    raise AssertionError("unreachable")
