"""Choosing a replica to send a frame to: power of two choices over a stage's live members.

The driver routes frames to the first unit this way, and each replica to the unit after
it.  A caller keeps at most ``limit`` calls in flight to one member; a retried item goes
to a member with nothing in flight and keeps others off it until released, so if it kills
that replica again no bystander shares the blame.  Membership is the driver's: it pushes
each replica the next unit's live members under a new version whenever they change
(a start, a replacement, a retirement, a death), and every frame carries the version the
driver held when it sent it, so a replica that receives a frame newer than its members
waits for the push that is on its way (a replacement gets traffic at once).  A caller
that finds a member dead drops it at once; the driver hears of it and pushes the rest.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from fitwork.errors import EngineError


def key(handle: Any) -> str:
    """The actor id of a handle, as the driver names actors (a task replica's slot is
    its name already)."""
    return handle if isinstance(handle, str) else str(handle._actor_id.hex())


class Router:
    """The members of one stage and the calls this caller has in flight to each."""

    def __init__(self, stage: int, limit: int, timeout: float = 30.0) -> None:
        self.stage, self.limit, self.timeout = stage, limit, timeout
        self.members: list[Any] = []
        self.version = -1
        self.in_flight: dict[str, int] = {}
        self.alone: set[str] = set()
        self.forked: set[str] = set()  # members a unit cannot kill (`set_forked`)
        self.dead: set[str] = set()
        self.cond = threading.Condition()

    def set_members(self, members: list[Any], version: int) -> None:
        """Take the driver's members of the stage (an older push than the one held is
        ignored; members this caller saw die stay out)."""
        with self.cond:
            if version < self.version:
                return
            self.members = [m for m in members if key(m) not in self.dead]
            self.version = version
            self.cond.notify_all()

    def set_forked(self, member: Any) -> None:
        """``member`` runs its unit in a forked child (`fitwork.engine.ray.forked`): a
        retry may go there while it holds other calls, as the replica itself runs the
        retry alone in its child (it waits for the others and holds new ones back), and a
        death there is blamed on the calls the child held."""
        with self.cond:
            self.forked.add(key(member))
            self.cond.notify_all()

    def follow(self, version: int) -> None:
        """Wait (within the deadline) for the members of ``version`` when a frame brings a
        version newer than the members held: the driver pushed them before sending it."""
        deadline = time.monotonic() + self.timeout
        with self.cond:
            while self.version < version and time.monotonic() < deadline:
                self.cond.wait(timeout=0.05)

    def pick(self, block: bool = True, alone: bool = False, patience: float = 120.0) -> Any:
        """The less loaded of two random members with room (None if none and not ``block``)."""
        deadline = time.monotonic() + patience
        with self.cond:
            while True:
                load = self.in_flight
                members = [m for m in self.members if key(m) not in self.alone]
                if alone:
                    members = [m for m in members
                               if key(m) in self.forked or not load.get(key(m), 0)]
                if members:
                    a, b = random.sample(members, 2) if len(members) > 1 else (members[0],) * 2
                    target = a if load.get(key(a), 0) <= load.get(key(b), 0) else b
                    name = key(target)
                    if load.get(name, 0) < self.limit:
                        load[name] = load.get(name, 0) + 1
                        if alone and name not in self.forked:
                            self.alone.add(name)
                        return target
                if not block:
                    return None
                if time.monotonic() > deadline:
                    raise EngineError(f"no live replica of stage {self.stage} for "
                                      f"{patience:.0f} s; check the cluster has resources "
                                      "for its unit")
                self.cond.wait(timeout=0.05)

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
        """Forget a member found dead, and keep it out of later pushes that still name it
        (the driver may not have heard yet)."""
        with self.cond:
            self.dead.add(key(target))
        self.drop(target)
