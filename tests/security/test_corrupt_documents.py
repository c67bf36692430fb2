"""Plans, profiles, run records and fleets that are corrupted or from another version."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitwork.errors import InputError
from fitwork.fit.plan import Plan, plan_for
from fitwork.hardware.fleet import Fleet
from fitwork.profiling import PipelineProfile
from fitwork.profiling.record import UnitProfile
from fitwork.telemetry.record import RunRecord
from tests.report.records import record

FUZZ = settings(derandomize=True, deadline=None, database=None,
                max_examples=int(os.environ.get("FITWORK_FUZZ_EXAMPLES", "0")) or 25,
                suppress_health_check=[HealthCheck.too_slow])
FLEET = Fleet.parse({"name": "two", "node_types": [
    {"name": "cpu", "count": 2, "cores": 8, "memory": "32GiB"},
    {"name": "gpu", "count": 1, "cores": 16, "memory": "64GiB", "devices": {"H100-SXM": 2}},
]})


def profile() -> PipelineProfile:
    def measured(name: str, wall: float) -> UnitProfile:
        return UnitProfile(name=name, kind="map", resources={"cpu": 1.0},
                           device_class="cpu-x86", samples=8, wall_s=wall, cpu_s=wall,
                           bytes_in=1e3, bytes_out=1e3, output_ratio=1.0, peak_rss=1 << 20)

    return PipelineProfile(fitwork_version="0.2.0", pipeline="p", host_class="cpu-x86",
                           created_at=0.0, units=[measured("a", 0.01), measured("b", 0.02)])


@pytest.fixture(scope="module")
def documents() -> dict[str, tuple[bytes, Callable[[Path], Any], str]]:
    """Each kind's good file, its loader, and the remedy its errors must name."""
    folder = Path(tempfile.mkdtemp(prefix="fitwork-docs-"))
    made = {"plan": plan_for(profile(), FLEET, time_limit=5), "profile": profile(),
            "record": record("r1", throughput=50.0)}
    found: dict[str, tuple[bytes, Callable[[Path], Any], str]] = {}
    loaders = {"plan": (Plan.load, "`fitwork plan`"),
               "profile": (PipelineProfile.load, "`fitwork profile`"),
               "record": (RunRecord.load, "--record FILE")}
    for kind, document in made.items():
        document.save(folder / kind)
        found[kind] = ((folder / kind).read_bytes(), *loaders[kind])
    found["fleet"] = (FLEET.to_yaml().encode(), Fleet.from_yaml, "fitwork fleet local")
    return found


def check_refusal(error: InputError, path: Path, remedy: str) -> None:
    message = str(error)
    assert "\n" not in message and str(path) in message, message
    assert message.endswith(remedy) or f"{remedy}`" in message, message


@FUZZ
@given(kind=st.sampled_from(["plan", "profile", "record", "fleet"]), data=st.data())
def test_corrupted_documents_load_or_say_which_file_and_how_to_remake_it(
        documents: dict[str, tuple[bytes, Callable[[Path], Any], str]], kind: str,
        data: st.DataObject) -> None:
    good, load, remedy = documents[kind]
    blob = bytearray(good)
    how = data.draw(st.sampled_from(["truncate", "flip", "invalid utf-8", "nul", "nest"]))
    spot = data.draw(st.integers(0, len(blob) - 1), label="where")
    if how == "truncate":
        blob = blob[:spot]
    elif how == "flip":
        blob[spot] ^= data.draw(st.integers(1, 255), label="xor")
    elif how == "invalid utf-8":
        blob[spot:spot] = b"\xc3\x28"
    elif how == "nul":
        blob[spot:spot] = b"\x00"
    else:
        blob = bytearray(b"[" * 5_000 + b"]" * 5_000)
    with tempfile.TemporaryDirectory() as name:
        path = Path(name) / f"{kind}.bad"
        path.write_bytes(bytes(blob))
        try:
            load(path)
        except InputError as exc:
            if kind != "fleet":
                check_refusal(exc, path, remedy)
                assert "make it again with" in str(exc)
            else:
                assert "\n" not in str(exc) and str(path) in str(exc), str(exc)


@pytest.mark.parametrize("kind", ["plan", "profile", "record"])
def test_a_document_from_an_older_fitwork_names_both_versions_and_the_fix(
        documents: dict[str, tuple[bytes, Callable[[Path], Any], str]], kind: str,
        tmp_path: Path) -> None:
    good, load, remedy = documents[kind]
    old = json.loads(good)
    old["fitwork_version"] = "0.0.9"
    del old[{"plan": "fitted", "profile": "units", "record": "wall_s"}[kind]]
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(old))
    with pytest.raises(InputError) as raised:
        load(path)
    message = str(raised.value)
    assert "written by fitwork 0.0.9" in message and "this fitwork 0.2.0" in message
    check_refusal(raised.value, path, remedy)
    assert "make it again with" in message


@pytest.mark.parametrize("kind", ["plan", "profile", "record"])
def test_unreadable_places_are_one_line(
        documents: dict[str, tuple[bytes, Callable[[Path], Any], str]], kind: str,
        tmp_path: Path) -> None:
    _, load, _ = documents[kind]
    with pytest.raises(InputError, match="is a directory"):
        load(tmp_path)
    with pytest.raises(InputError, match="no such file; make one with"):
        load(tmp_path / "missing.json")
    (tmp_path / "empty.json").write_bytes(b"")
    with pytest.raises(InputError, match="make it again with"):
        load(tmp_path / "empty.json")


def test_fleet_not_utf8_or_nested_too_deep(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(InputError, match=r"a\.yaml: not UTF-8 text \(byte 10\); fix it"):
        Fleet.from_yaml(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_bytes(b"[" * 20_000)
    with pytest.raises(InputError, match=r"b\.yaml: YAML nested too deeply"):
        Fleet.from_yaml(tmp_path / "b.yaml")
