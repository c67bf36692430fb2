"""The registry actor: who the live replicas of each unit are, and which ones died.

Replicas read their downstream members from it and report a replica they found dead; the
driver reads the reports, starts replacements, retires replicas, and records each change
here.  Every change bumps ``version``; the driver passes the version with each frame, so a
replica whose view is older refreshes before it routes (a replacement gets traffic at once).
"""

from __future__ import annotations

from typing import Any


def _key(handle: Any) -> str:
    return str(handle._actor_id.hex())


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
        live = [h for h in self.members.get(stage, []) if _key(h) not in self.dead]
        return self.version, live

    def report_dead(self, stage: int, actor_id: str) -> None:
        if actor_id not in self.dead:
            self.dead.add(actor_id)
            self.reports.append((stage, actor_id))

    def take_reports(self) -> list[tuple[int, str]]:
        reports, self.reports = self.reports, []
        return reports

    def add(self, stage: int, handle: Any) -> int:
        return self.set_members(stage, [*self.members.get(stage, []), handle])

    def remove(self, stage: int, actor_id: str) -> int:
        """Take a replica out (dead, or retiring): callers stop picking it."""
        self.dead.add(actor_id)
        kept = [h for h in self.members.get(stage, []) if _key(h) != actor_id]
        return self.set_members(stage, kept)
