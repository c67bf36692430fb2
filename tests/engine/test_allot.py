"""What one replica gets is decided once (`fitwork.placement.allot`): the group's batch and
resources where a plan set them, else the unit's; an engine's replica runs by it; and a
per-unit flag for a unit a plan runs fused is refused the same way for every flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import fitwork
from fitwork import Pipeline, unit
from fitwork.errors import UnitDefinitionError
from fitwork.placement import Group, Placement, allot
from fitwork.resources import Resources


@unit(cpu=1, batch_size=8, batch_wait=0.2)
def sizes(batch: list[int]) -> list[int]:
    return [len(batch)] * len(batch)


def test_the_group_wins_where_it_says_and_the_unit_elsewhere() -> None:
    planned = Group("sizes", 2, batch_size=32, resources=Resources(cpu=1.6),
                    device_class="cpu-x")
    given = allot(sizes, planned)
    assert (given.batch_size, given.cores, given.threads, given.planned) == (32, 1.6, 2, True)
    assert given.device_class == "cpu-x" and given.batch_wait == 0.2
    bare = allot(sizes, Group("sizes", 2))
    assert (bare.batch_size, bare.resources, bare.planned) == (8, sizes.resources, False)
    assert allot(sizes, None).batch_size == 8


def test_a_local_replica_batches_at_its_groups_size() -> None:
    placement = Placement((Group("sizes", 1, batch_size=3),), "plan")
    options: dict[str, Any] = {"placement": placement}
    with fitwork.run(Pipeline(sizes), range(30), engine="local", **options) as result:
        seen = list(result)
    assert len(seen) == 30 and max(seen) == 3


@unit(cpu=0.5)
def passed(x: int) -> int:
    return x


@pytest.mark.processes
def test_every_engines_replica_batches_at_its_allotment_not_its_declaration(
        engine: str) -> None:
    """``sizes`` declares batch_size=8; its plan group says 32.  A replica (the second unit,
    fed by another replica on Ray, by the driver's channel locally) sees batches of the
    group's size, and the run record holds the allotted size."""
    placement = Placement((Group("passed", 1), Group("sizes", 1, batch_size=32)), "plan")
    with fitwork.run(Pipeline(passed, sizes), range(400), engine=engine,
                     placement=placement) as result:
        seen = list(result)
    assert len(seen) == 400 and max(seen) == 32, sorted(set(seen))
    (_, batched) = result.record.units
    assert batched.batch_size == 32


_state = threading.Lock(), [0]


def _overlap(x: int) -> int:
    """How many calls of this process ran at once while this one ran."""
    lock, now = _state
    with lock:
        now[0] += 1
        most = now[0]
    time.sleep(0.03)
    with lock:
        most = max(most, now[0])
        now[0] -= 1
    return most


overlap = unit(io=4, cpu=0.5, name="overlap")(_overlap)


@pytest.mark.processes
def test_every_engines_replica_runs_the_calls_at_once_it_is_allotted(engine: str) -> None:
    """``overlap`` declares io=4; a group that says io=2 holds its one replica to two calls
    at once (and unplanned, the same replica does run more than two: the bound is real)."""
    planned = Placement((Group("overlap", 1, io=2),), "plan")
    with fitwork.run(Pipeline(overlap), range(120), engine=engine,
                     placement=planned) as result:
        held = list(result)
    assert len(held) == 120 and max(held) == 2, sorted(set(held))
    assert result.record.units[0].resources.get("io") == 2
    with fitwork.run(Pipeline(overlap), range(120), engine=engine, workers={"overlap": 1}
                     ) as result:
        free = list(result)
    assert max(free) > 2, sorted(set(free))


def test_a_batch_size_for_a_unit_that_takes_one_item_is_refused() -> None:
    with pytest.raises(UnitDefinitionError, match="'passed' is given batch_size=4, but it is "
                                                 "not batched"):
        allot(passed, Group("passed", 1, batch_size=4))


PIPE = '''from fitwork import Pipeline, unit


@unit
def featurize(row):
    return {"v": row["n"] * 2}


@unit(batch_size=16)
def score(rows):
    return [r["v"] + 1 for r in rows]


pipeline = Pipeline(featurize, score)
'''


def test_every_flag_for_a_unit_a_plan_fuses_is_refused_alike(tmp_path: Path) -> None:
    """``--workers``, ``--batch``, ``--cpus`` and ``--io`` naming a unit the plan runs
    fused: each refused in one line naming the unit and ``plan --no-fuse``, nothing run."""
    (tmp_path / "pipe.py").write_text(PIPE)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"n": n}) + "\n"
                                               for n in range(2000)))
    for args in (["profile", "pipe:pipeline", "--input", "in.jsonl", "-o", "prof.json"],
                 ["plan", "pipe:pipeline", "--profile", "prof.json", "-o", "plan.json"]):
        done = cli(tmp_path, *args)
        assert done.returncode == 0, done.stderr[-2000:]
    if not json.loads((tmp_path / "plan.json").read_text())["fused"]:
        pytest.skip("the fit kept these units split on this host: nothing is fused")
    for flag, value in (("--workers", "featurize=2"), ("--batch", "score=64"),
                        ("--cpus", "score=0.5"), ("--io", "featurize=4")):
        done = cli(tmp_path, "run", "pipe:pipeline", "--input", "in.jsonl", "--output",
                   "out.jsonl", "--plan", "plan.json", flag, value)
        unit_name = value.split("=")[0]
        assert done.returncode != 0 and not (tmp_path / "out.jsonl").exists()
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert f"{flag} {unit_name}=...: the plan runs {unit_name!r} fused" in lines[-1]
        assert "fitwork plan --no-fuse" in lines[-1]


def cli(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    return subprocess.run([str(Path(sys.executable).with_name("fitwork")), *args], cwd=where,
                          env=env,
                          capture_output=True, text=True, timeout=300, check=False)
