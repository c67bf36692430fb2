"""Pydantic validation errors squeezed onto one line, each with its field path."""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["one_line"]


def one_line(error: ValidationError) -> str:
    """Every error as ``path: message``, joined by "; ": ``node_types[1].count: ...``.

    A ``ValueError`` raised by a validator keeps its own message, without pydantic's
    "Value error, " prefix; whitespace runs collapse so the result is a single line.
    """
    parts = []
    for item in error.errors():
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in item["loc"])
        ctx = item.get("ctx") or {}
        raised = item["type"] == "value_error" and "error" in ctx
        message = str(ctx["error"]) if raised else item["msg"]
        message = " ".join(message.split())
        parts.append(f"{loc.lstrip('.')}: {message}" if loc else message)
    return "; ".join(parts)
