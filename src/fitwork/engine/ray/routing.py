"""Choosing a replica to send a frame to: power of two choices over a stage's live members.

The driver routes frames to the first unit this way, and each replica to the unit after
it.  A caller keeps at most ``limit`` calls in flight to one member; a retried item goes
to a member with nothing in flight and keeps others off it until released, so if it kills
that replica again no bystander shares the blame.  Membership comes from the registry,
refreshed when a frame arrives carrying a newer registry version than the one held (the
driver bumps it whenever it adds, replaces or retires a replica), or when a member dies.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from fitwork.errors import EngineError


def key(handle: Any) -> str:
    """The actor id of a handle, as the registry and the driver name actors."""
    return str(handle._actor_id.hex())


class Router:
    """The members of one stage and the calls this caller has in flight to each."""

    def __init__(self, stage: int, limit: int, registry: Any = None,
                 timeout: float = 30.0) -> None:
        self.stage, self.limit, self.registry, self.timeout = stage, limit, registry, timeout
        self.members: list[Any] = []
        self.version = -1
        self.in_flight: dict[str, int] = {}
        self.alone: set[str] = set()
        self.cond = threading.Condition()

    def set_members(self, members: list[Any], version: int) -> None:
        """Replace the members (the driver, which knows them first hand)."""
        with self.cond:
            self.members, self.version = list(members), version
            self.cond.notify_all()

    def refresh(self) -> None:
        """Read the stage's live members from the registry."""
        import ray
        from ray.exceptions import GetTimeoutError

        try:
            version, members = ray.get(self.registry.members_of.remote(self.stage),
                                       timeout=self.timeout)
        except GetTimeoutError:
            raise EngineError(f"the fitwork registry did not answer within {self.timeout:g} s"
                              f" (members of stage {self.stage})") from None
        self.set_members(members, version)

    def follow(self, version: int) -> None:
        """Refresh when the registry has moved on since the members were read."""
        if version > self.version and self.registry is not None:
            self.refresh()

    def pick(self, block: bool = True, alone: bool = False, patience: float = 120.0) -> Any:
        """The less loaded of two random members with room (None if none and not ``block``)."""
        deadline = time.monotonic() + patience
        while True:
            if not self.members and self.registry is not None:
                self.refresh()
            with self.cond:
                load = self.in_flight
                members = [m for m in self.members if key(m) not in self.alone]
                if alone:
                    members = [m for m in members if not load.get(key(m), 0)]
                if members:
                    a, b = random.sample(members, 2) if len(members) > 1 else (members[0],) * 2
                    target = a if load.get(key(a), 0) <= load.get(key(b), 0) else b
                    name = key(target)
                    if load.get(name, 0) < self.limit:
                        load[name] = load.get(name, 0) + 1
                        if alone:
                            self.alone.add(name)
                        return target
                if not block:
                    return None
                if self.members:
                    self.cond.wait(timeout=0.05)
                    if time.monotonic() < deadline:
                        continue
            if time.monotonic() > deadline:
                raise EngineError(f"no live replica of stage {self.stage} for {patience:.0f} s;"
                                  " check the cluster has resources for its unit")
            time.sleep(0.05)

    def release(self, target: Any) -> None:
        """One call to ``target`` is over: free its slot."""
        with self.cond:
            name = key(target)
            self.in_flight[name] = max(0, self.in_flight.get(name, 1) - 1)
            self.alone.discard(name)
            self.cond.notify_all()

    def drop(self, target: Any) -> None:
        """Forget a member (dead or retired) locally."""
        name = key(target)
        with self.cond:
            self.members = [m for m in self.members if key(m) != name]
            self.cond.notify_all()

    def mark_dead(self, target: Any) -> None:
        """Forget a dead member and tell the registry, which tells the driver."""
        self.drop(target)
        if self.registry is not None:
            self.registry.report_dead.remote(self.stage, key(target))
