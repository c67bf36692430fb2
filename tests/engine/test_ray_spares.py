"""On Ray, rows that kill their replica are replaced from warm spares (started and built
ahead), the replacements run their unit in a forked child so later deaths cost a child, not
an actor, every output is written once, and each unit's items in are counted once however
often delivered."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import fitwork
from fitwork import Pipeline, unit

ROWS = 500


def killer(n: int) -> bool:
    """2% of rows kill the first replica that meets them."""
    return n % 50 == 7


def kill_the_first(marks: str, n: int) -> None:
    """Kill this process if it is the first to meet row ``n`` (its mark made first)."""
    try:
        os.close(os.open(os.path.join(marks, str(n)), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


@unit(cpu=0.5)
def first(row: dict[str, Any]) -> dict[str, Any]:
    if row["where"] == 0 and killer(row["n"]):
        kill_the_first(row["marks"], row["n"])
    return row


@unit(cpu=0.5)
def second(row: dict[str, Any]) -> int:
    if row["where"] == 1 and killer(row["n"]):
        kill_the_first(row["marks"], row["n"])
    return int(row["n"])


def rows(tmp_path: Path, where: int) -> list[dict[str, Any]]:
    marks = tmp_path / "marks"
    marks.mkdir()
    return [{"n": n, "marks": str(marks), "where": where} for n in range(ROWS)]


def test_deaths_are_replaced_from_warm_spares(ray_cluster: Any, tmp_path: Path) -> None:
    with fitwork.run(Pipeline(first, second), rows(tmp_path, 0), engine="ray",
                     workers={"first": 2, "second": 2}) as result:
        outputs = Counter(result)
    record = result.record
    assert outputs == Counter(range(ROWS))  # exactly once
    deaths = sum(1 for n in range(ROWS) if killer(n))
    assert record.worker_restarts == deaths  # replicas and forked unit processes
    spares = (record.host or {})["ray_spares"]
    assert set(spares) == {"first"}  # only the unit that lost replicas keeps spares
    mine = spares["first"]
    # The two first replicas each die once; their replacements run the unit in a forked
    # child, so every later death costs a child, not an actor.  The first death made the
    # unit keep a spare for the replica that does not fork yet (none for those that do),
    # which the second death takes unless both came before it started.
    assert mine["forked_deaths"] == deaths - 2, mine
    assert mine["started"] <= 1 and mine["handed_over"] <= 1, mine
    assert mine["started"] == mine["handed_over"] + mine["let_go"]
    assert all(0.0 <= cpu <= 0.5 for cpu in mine["cores"])
    assert all(s["ended_s"] >= s["started_s"] for s in mine["spares"])
    handed = {s["worker"] for s in mine["spares"] if s["worker"] is not None}
    live = {w.worker_id for w in record.workers if w.unit == "first" and w.worker_id >= 0}
    assert handed <= live and len(live) == 2 + 2
    assert [u.items_in for u in record.units] == [ROWS, ROWS]  # items, not deliveries
    assert [u.items_out for u in record.units] == [ROWS, ROWS]


@pytest.mark.parametrize("engine", ["local", "ray"])
@pytest.mark.parametrize("where", [0, 1])
def test_items_in_count_each_item_once(engine: str, where: int, tmp_path: Path,
                                       request: pytest.FixtureRequest) -> None:
    """A death in either unit: each unit's items in is the rows, once each (a row sent
    again after a death is a retry, in ``record.retries``)."""
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    with fitwork.run(Pipeline(first, second), rows(tmp_path, where), engine=engine,
                     workers={"first": 2, "second": 2}) as result:
        outputs = Counter(result)
    record = result.record
    assert outputs == Counter(range(ROWS))
    killers = sum(1 for n in range(ROWS) if killer(n))
    if engine == "local":  # one death per killing row, each a SIGKILL in the record
        died = [w for w in record.workers if w.worker_id >= 0 and w.exit_code == -9]
        assert len(died) == killers, died
        # each replaced, but a death the driver reaps after the last output (a row sent
        # again while its first copy was in flight can kill that copy's worker late)
        # needs no replacement: the run is over
        assert killers - 1 <= record.worker_restarts <= killers
    else:  # a Ray replica's death is learnt from the call it held, before its retry
        assert record.worker_restarts == killers
    assert record.retries > 0
    assert [u.items_in for u in record.units] == [ROWS, ROWS]
    assert [u.items_out for u in record.units] == [ROWS, ROWS]


def test_without_spares_deaths_are_still_handled_and_no_spare_is_kept(
        ray_cluster: Any, tmp_path: Path) -> None:
    with fitwork.run(Pipeline(first, second), rows(tmp_path, 0), engine="ray",
                     workers={"first": 2, "second": 2}, spares=0) as result:
        outputs = Counter(result)
    record = result.record
    assert outputs == Counter(range(ROWS))  # exactly once
    assert record.worker_restarts == sum(1 for n in range(ROWS) if killer(n))
    mine = (record.host or {})["ray_spares"]["first"]
    assert mine["started"] == 0 and mine["forked_deaths"] >= 1, mine


def test_with_fork_first_every_death_is_a_forked_childs_and_no_actor_dies(
        ray_cluster: Any, tmp_path: Path) -> None:
    with fitwork.run(Pipeline(first, second), rows(tmp_path, 1), engine="ray",
                     workers={"first": 2, "second": 2}, fork_first=True) as result:
        outputs = Counter(result)
    record = result.record
    killers = sum(1 for n in range(ROWS) if killer(n))
    assert outputs == Counter(range(ROWS))  # exactly once
    assert record.worker_restarts == killers
    mine = (record.host or {})["ray_spares"]["second"]
    # the replicas forked their unit from the start: no actor was lost, none replaced
    assert mine["forked_deaths"] == killers and mine["started"] == 0, mine
    # each death lost only the row it happened in, which alone was sent again
    assert record.retries == killers
    assert [u.items_in for u in record.units] == [ROWS, ROWS]


def test_fork_first_and_keep_warm_are_refused_together(ray_cluster: Any) -> None:
    with pytest.raises(fitwork.UnitDefinitionError, match="fork_first and keep_warm"):
        fitwork.run(Pipeline(first, second), [], engine="ray", fork_first=True,
                    keep_warm=10.0)
