"""The control file a fleet run moves a running pipeline's replicas through.

The coordinator of `fitwork run --jobs` writes, per running pipeline, a small JSON file
(``{"seq": 3, "replicas": {"score": 2}}``, replaced atomically); that pipeline's own
`fitwork run --control FILE` reads it whenever it reports progress and resizes its units
live (`fitwork.RunResult.resize`).  Nothing else crosses between the two processes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["Control", "write_control"]


def write_control(path: Path, seq: int, replicas: Mapping[str, int]) -> None:
    """Replace ``path`` with decision ``seq``: the replicas each unit should now run."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps({"seq": seq, "replicas": dict(replicas)}))
    os.replace(partial, path)


class Control:
    """Reads a control file and resizes a run to what it says, once per decision."""

    def __init__(self, path: Path, run: Any) -> None:
        self.path = path
        self.run = run
        self.seq = -1
        self.stamp = 0.0

    def poll(self) -> None:
        """Apply the file's decision if it is newer than the last one applied."""
        try:
            stamp = self.path.stat().st_mtime
        except OSError:
            return
        if stamp == self.stamp:
            return
        self.stamp = stamp
        try:
            decision = json.loads(self.path.read_text())
            seq, replicas = int(decision["seq"]), dict(decision["replicas"])
        except (OSError, ValueError, KeyError, TypeError):
            return  # caught mid-replace or foreign: the next poll reads it again
        if seq <= self.seq:
            return
        self.seq = seq
        for unit, count in replicas.items():
            try:
                self.run.resize(str(unit), max(1, int(count)))
            except Exception as exc:  # a unit this run does not have: say so, go on
                print(f"control {self.path}: cannot resize {unit!r} ({exc})", file=sys.stderr)
