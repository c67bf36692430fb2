"""The failure books every engine keeps: dead letters on disk, counts, and the abort rule."""

from __future__ import annotations

import json
from typing import IO, Any

from fitwork.engine.base import RunOptions
from fitwork.errors import TooManyFailures
from fitwork.telemetry.record import FailureRecord

KEEP_FAILURES = 1000


class Ledger:
    """Counts failed items, appends them to the dead-letter file, and says when to stop."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.failures = self.poisoned = 0
        self.by_unit: dict[str, int] = {}
        self.items: list[FailureRecord] = []
        self.abort: TooManyFailures | None = None
        self._file: IO[str] | None = None

    def dead_letter(self, failure: dict[str, Any]) -> None:
        """Record one failed item; sets ``abort`` once more than ``max_failures`` failed."""
        self.failures += 1
        self.by_unit[failure["unit"]] = self.by_unit.get(failure["unit"], 0) + 1
        if failure["kind"] == "poison":
            self.poisoned += 1
        if len(self.items) < KEEP_FAILURES:
            self.items.append(FailureRecord(item=failure["item"], unit=failure["unit"],
                                            error=failure["error"], kind=failure["kind"]))
        path = self.options.dead_letter
        if path is not None:
            if self._file is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._file = path.open("a", encoding="utf-8")
            self._file.write(json.dumps(failure) + "\n")
            self._file.flush()
        limit = self.options.max_failures
        if limit is not None and self.failures > limit and self.abort is None:
            where = f"; dead letters in {path}" if path else ""
            self.abort = TooManyFailures(
                f"{self.failures} items failed, more than max_failures={limit} "
                f"(last: unit {failure['unit']!r}: {failure['error']}){where}; "
                "fix the unit or raise max_failures")

    def close(self) -> None:
        """Close the dead-letter file."""
        if self._file is not None:
            self._file.close()
            self._file = None
