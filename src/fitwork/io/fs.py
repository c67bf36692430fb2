"""Where inputs live: local paths and globs, and object-store URLs through optional fsspec."""

from __future__ import annotations

import glob
import os
import re
from typing import IO, Any

from fitwork.errors import InputError

__all__ = ["FSSPEC_EXTRA", "expand", "is_glob", "is_url", "open_input"]

FSSPEC_EXTRA = "install the fsspec extra: pip install 'fitwork[fsspec]'"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_MAGIC = re.compile(r"[*?[]")
_WHITESPACE = re.compile(r"\s+")


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a URL such as ``s3://bucket/key`` (a scheme, then ``://``).

    A `pathlib.Path` never is: it folds ``//`` into ``/``, so pass URLs as strings.
    """
    return bool(_URL.match(os.fspath(path)))


def is_glob(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a glob wildcard (``*``, ``?`` or ``[``)."""
    return bool(_MAGIC.search(os.fspath(path)))


def expand(pattern: str, *, files_only: bool = False) -> list[str]:
    """The paths a pattern names, sorted.

    A path that exists is returned as it is (a directory too: it is not listed here); a
    local glob (``data/*.jsonl``, ``data/**/*.parquet``, ``**`` spanning directories) gives
    its matches; a URL (``s3://bucket/x/*.parquet``, ``memory://x/*.jsonl``) is expanded
    through fsspec and its matches come back as URLs. Nothing there gives ``[]``.
    ``files_only`` keeps only regular files (no directories). Hidden names (``.x``) match
    only a pattern that spells the dot, as in a shell.
    """
    pattern = os.fspath(pattern)
    if is_url(pattern):
        return _expand_url(pattern, files_only)
    if os.path.lexists(pattern):
        keep = not files_only or os.path.isfile(pattern)
        return [pattern] if keep else []
    if not is_glob(pattern):
        return []
    try:
        matches = glob.glob(pattern, recursive=True)
    except OSError as exc:
        raise InputError(f"input {pattern}: cannot expand the pattern ({_reason(exc)}); "
                         "check the path") from exc
    return sorted(m for m in matches if not files_only or os.path.isfile(m))


def _expand_url(pattern: str, files_only: bool) -> list[str]:
    place = f"input {pattern}"
    fs, inner = _filesystem(pattern, place)
    try:
        if not is_glob(inner):
            info = fs.info(inner)
            keep = not files_only or info.get("type") == "file"
            return [pattern] if keep else []
        found = fs.glob(inner, detail=True)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise InputError(f"{place}: cannot list ({_reason(exc)}); check the URL and your "
                         "access to the store") from exc
    except Exception as exc:  # a store's own errors: credentials, a bad bucket name
        raise InputError(f"{place}: cannot list ({_one_line(exc)}); check the URL and your "
                         "access to the store") from exc
    return sorted(fs.unstrip_protocol(name) for name, info in found.items()
                  if not files_only or info.get("type") == "file")


def open_input(path: str, mode: str = "rb", place: str | None = None) -> IO[Any]:
    """Open an input for reading: a local file, or a URL through fsspec.

    Failures are one-line `InputError` s naming ``place`` (``input PATH`` by default) and
    what to do: a missing file, no permission, an unknown protocol, or fsspec (or the
    store's own package, such as ``s3fs``) not installed.
    """
    place = place or f"input {path}"
    url = is_url(path)
    where = "the URL" if url else "the path"
    try:
        if url:
            fs, inner = _filesystem(path, place)
            return fs.open(inner, mode)  # type: ignore[no-any-return]
        return open(path, mode)
    except FileNotFoundError as exc:
        raise InputError(f"{place}: no such file; check {where}") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{place}: is a directory, expected a file; check {where}") from exc
    except PermissionError as exc:
        raise InputError(f"{place}: permission denied; check your access to it, or read "
                         "another input") from exc
    except OSError as exc:
        raise InputError(f"{place}: cannot open ({_reason(exc)}); check {where}") from exc


def _filesystem(url: str, place: str) -> tuple[Any, str]:
    """The fsspec filesystem for a URL and the path inside it, or a one-line InputError."""
    try:
        from fsspec.core import url_to_fs
    except ImportError as exc:
        raise InputError(f"{place}: reading a URL needs fsspec, which is missing; "
                         f"{FSSPEC_EXTRA}") from exc
    scheme = url.split("://", 1)[0]
    try:
        return url_to_fs(url)  # type: ignore[no-any-return]
    except ImportError as exc:  # the store's own package, e.g. s3fs for s3://
        raise InputError(f"{place}: {scheme}:// needs a package that is missing "
                         f"({_one_line(exc)}); install it beside fitwork[fsspec]") from exc
    except ValueError as exc:
        raise InputError(f"{place}: cannot read {scheme}:// URLs ({_one_line(exc)}); check "
                         "the URL's protocol") from exc


def _one_line(text: object) -> str:
    squeezed = _WHITESPACE.sub(" ", str(text)).strip()
    return "".join(ch if ch.isprintable() else "?" for ch in squeezed)


def _reason(exc: OSError) -> str:
    return _one_line(exc.strerror or exc).lower()
