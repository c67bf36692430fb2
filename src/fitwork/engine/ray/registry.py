"""The registry actor: who the live replicas of each unit are, and which ones died.

Replicas read their downstream members from it and report a replica they found dead; the
driver reads the reports, starts replacements and records them here.  It also owns every
output object the last unit puts into the object store, so outputs outlive the replica
that made them.
"""

from __future__ import annotations

from typing import Any


class Registry:
    """Membership per stage, versioned; death reports for the driver."""

    def __init__(self) -> None:
        self.members: dict[int, list[Any]] = {}
        self.version = 0
        self.dead: set[str] = set()
        self.reports: list[tuple[int, str]] = []

    def set_members(self, stage: int, handles: list[Any]) -> int:
        self.members[stage] = list(handles)
        self.version += 1
        return self.version

    def members_of(self, stage: int) -> tuple[int, list[Any]]:
        live = [h for h in self.members.get(stage, []) if h._actor_id.hex() not in self.dead]
        return self.version, live

    def report_dead(self, stage: int, actor_id: str) -> None:
        if actor_id not in self.dead:
            self.dead.add(actor_id)
            self.reports.append((stage, actor_id))

    def take_reports(self) -> list[tuple[int, str]]:
        reports, self.reports = self.reports, []
        return reports

    def replace(self, stage: int, old: str, new: Any) -> int:
        self.dead.add(old)
        kept = [h for h in self.members.get(stage, []) if h._actor_id.hex() != old]
        return self.set_members(stage, [*kept, new])
