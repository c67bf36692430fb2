"""`Failure`: one item that failed in a unit: the dead-letter record, everywhere the same."""

from __future__ import annotations

import json
import traceback as tb
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

INPUT_LIMIT = 16 * 1024
TRACE_LIMIT = 8 * 1024

FailureKind = Literal["error", "poison"]


def portable(value: Any) -> Any:
    """``value`` if it is JSON and small, else a short repr (what a dead letter can hold)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return {"repr": repr(value)[:1000]}
    return value if len(text) <= INPUT_LIMIT else {"repr": text[:1000]}


def describe(error: BaseException) -> str:
    """``Type: message``, the first line of a failure."""
    return f"{type(error).__name__}: {error}"


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed item.

    ``kind`` is ``error`` when the unit raised (after its retries) and ``poison`` when the
    item killed ``max_attempts`` workers.  ``attempt`` counts the tries made.  ``item`` is
    the source item's index and ``run_id`` the run's, filled in by the run's books; a
    worker sets ``frame`` and ``offset`` so the books can find the item.
    """

    unit: str
    error: str
    kind: FailureKind = "error"
    attempt: int = 1
    path: tuple[int, ...] = ()
    traceback: str = ""
    input: Any = None
    item: int = -1
    run_id: str = ""
    frame: int = -1
    offset: int = -1

    @classmethod
    def of(cls, unit: str, error: BaseException, value: Any, *, attempt: int = 1,
           path: tuple[int, ...] = (), frame: int = -1, offset: int = -1) -> Failure:
        """The record of ``error`` raised by ``unit`` on ``value``."""
        trace = "".join(tb.format_exception(error))[-TRACE_LIMIT:]
        return cls(unit=unit, error=describe(error), attempt=attempt, path=tuple(path),
                   traceback=trace, input=portable(value), frame=frame, offset=offset)

    def placed(self, item: int, run_id: str) -> Failure:
        """This failure with the source item's index and the run's id filled in."""
        return replace(self, item=item, run_id=run_id)

    def summary(self) -> Failure:
        """This failure without its input and traceback (what a run record keeps)."""
        return replace(self, traceback="", input=None)

    def to_json(self) -> dict[str, Any]:
        """The dead-letter line: every field but the wire-only frame and offset."""
        data = asdict(self)
        del data["frame"], data["offset"]
        data["path"] = list(self.path)
        return data
