"""What reading and writing share: a file's format by its suffix, the pyarrow import, and
errors squeezed onto one printable line."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from fitwork.errors import InputError

PARQUET_EXTRA = "install the parquet extra: pip install 'fitwork[parquet]'"
_WHITESPACE = re.compile(r"\s+")


def one_line(text: object) -> str:
    """Any message squeezed onto one printable line, so an error stays a single line and
    no control character from a file reaches the terminal."""
    squeezed = _WHITESPACE.sub(" ", str(text)).strip()
    return "".join(ch if ch.isprintable() else "?" for ch in squeezed)


def os_reason(exc: OSError) -> str:
    """The readable part of an OS error ("permission denied"), without the path."""
    reason = exc.strerror or type(exc).__name__
    return one_line(reason).lower()


def import_pyarrow(place: str) -> tuple[ModuleType, ModuleType]:
    """`pyarrow` and `pyarrow.parquet`, or an InputError naming the place and the extra."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise InputError(
            f"{place}: Parquet needs pyarrow, which is missing; {PARQUET_EXTRA}"
        ) from exc
    return pyarrow, pyarrow.parquet


PYARROW_SAFE_SINCE = (14, 0, 1)
"""pyarrow before this unpickles extension types found in a Parquet file (CVE-2023-47248)."""


def pyarrow_reads_safely(version: str) -> bool:
    """Whether this pyarrow release reads Parquet without unpickling anything in the file."""
    parts = []
    for piece in version.split(".")[:3]:
        digits = re.match(r"\d*", piece)
        parts.append(int(digits.group() or 0) if digits else 0)
    return tuple(parts) >= PYARROW_SAFE_SINCE


def file_format(path: Path) -> str:
    """Which reader or writer a file path gets, from its suffix: "csv", "parquet" or "jsonl"."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix == ".parquet":
        return "parquet"
    return "jsonl"
