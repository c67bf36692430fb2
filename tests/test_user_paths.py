"""User paths: the real CLI and the Python API in subprocesses, as a new user runs them.

Each case of the all-pairs matrix (`tests/user_paths/matrix.py`) writes nothing of its own:
the pipeline is a module in the working directory (``userpipe:pipeline``), a file given by
path from elsewhere, or a ``__main__`` script with plain functions, ``@unit`` functions or a
class unit; it runs unplanned, on a split plan, on a fused plan or ``--decompose``d; on the
local engine, Ray actors or Ray task replicas (a Ray cluster of 2 CPUs this module starts,
with token authentication); over JSON Lines, CSV, Parquet or a directory of shards into a
directory; with clean rows, rows that raise, or rows that kill their worker once.  Every
case checks every output arrives exactly once, the failed rows alone in the dead letters,
and the exit code.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import short_temp
from tests.user_paths.matrix import Case, all_pairs
from tests.user_paths.sources import KILLS, MODULE, POISONS, RAISES, ROWS, SCRIPTS

FITWORK = str(Path(sys.executable).with_name("fitwork"))
SHARDS = 4
TIMEOUT = 300


def _rows(kind: str = "clean", marks: Path | None = None) -> list[dict[str, Any]]:
    """The input rows; some raise or kill once when ``kind`` says so (the rest say "")."""
    rows = []
    for i in range(ROWS):
        fail = ""
        if kind == "raising" and i % RAISES[0] == RAISES[1]:
            fail = "raise"
        if kind == "killing" and i % KILLS[0] == KILLS[1]:
            fail = f"kill:{marks}"
        rows.append({"id": i, "x": round(i / 10, 1), "fail": fail})
    return rows


def _expected(rows: str) -> dict[int, dict[str, Any]]:
    out = {}
    for row in _rows():
        ident = row["id"]
        if rows == "raising" and ident % RAISES[0] == RAISES[1]:
            continue
        out[ident] = {"id": ident, "y": round(row["x"] * row["x"] + 1.0, 6),
                      "tag": "even" if ident % 2 == 0 else "odd"}
    return out


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)


def _write_inputs(root: Path, rows: list[dict[str, Any]]) -> None:
    """The same rows as JSON Lines, CSV, Parquet and a directory of JSON Lines shards."""
    with open(root / "in.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    with open(root / "in.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "x", "fail"])
        writer.writeheader()
        writer.writerows(rows)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), root / "in.parquet", row_group_size=64)
    (root / "shards").mkdir()
    per = ROWS // SHARDS
    for s in range(SHARDS):
        with open(root / "shards" / f"part{s}.jsonl", "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows[s * per:(s + 1) * per])


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's folder: the module, the scripts, the inputs, and plans made by the CLI."""
    pytest.importorskip("pyarrow")
    root = tmp_path_factory.mktemp("user")
    (root / "userpipe.py").write_text(MODULE)
    for name, text in SCRIPTS.items():
        (root / f"{name}.py").write_text(text)
    _write_inputs(root, _rows())
    env = _clean_env()
    profile = _run([FITWORK, "profile", "userpipe:pipeline", "--input", "in.jsonl",
                    "-o", "profile.json"], root, env)
    assert profile.returncode == 0, profile.stderr[-2000:]
    for name, extra in (("fused", []), ("split", ["--no-fuse"])):
        plan = _run([FITWORK, "plan", "userpipe:pipeline", "--profile", "profile.json",
                     "-o", f"{name}.json", *extra], root, env)
        assert plan.returncode == 0, plan.stderr[-2000:]
    assert json.loads((root / "fused.json").read_text())["fused"] is True, \
        "the fit no longer fuses stages this light: the fused cases need another pipeline"
    assert json.loads((root / "split.json").read_text())["fused"] is False
    return root


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}


class RayHead:
    """A 2-CPU Ray head on this host with its own token; stopped by that token."""

    def __init__(self, root: Path) -> None:
        self.token = secrets.token_hex(32)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.env = {**_clean_env(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}
        started = _run([str(Path(sys.executable).with_name("ray")), "start", "--head",
                        "--num-cpus=2", f"--port={self.port}", "--node-ip-address=127.0.0.1",
                        f"--temp-dir={root}", "--include-dashboard=false",
                        "--object-store-memory=200000000", "--disable-usage-stats"],
                       root, self.env)
        assert started.returncode == 0, started.stderr[-2000:]
        self.address = f"127.0.0.1:{self.port}"

    def processes(self) -> list[int]:
        """Every process on this host started with this head's token in its environment."""
        mark = f"RAY_AUTH_TOKEN={self.token}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and entry.name != str(os.getpid()):
                try:
                    if mark in (entry / "environ").read_bytes():
                        found.append(int(entry.name))
                except OSError:
                    continue
        return found

    def stop(self) -> None:
        for _ in range(3):
            pids = self.processes()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed: pip install 'fitwork[ray]'")
    with short_temp("fw-head-") as temp:
        head = RayHead(temp)
        try:
            yield head
        finally:
            head.stop()


def _command(case: Case, root: Path, data: Path, where: Path, address: str) -> list[str]:
    """The command a user types for this case: the pipeline in ``root``, inputs in ``data``."""
    if case.input == "shards":
        source, output = data / "shards", f"{where / 'out'}/"
    else:
        source, output = data / f"in.{case.input}", str(where / "out.jsonl")
    dead = str(where / "dead.jsonl")
    plan = str(root / f"{case.layout}.json") if case.layout in ("split", "fused") else ""
    if case.source.startswith("main_"):
        spec = {"engine": case.engine, "address": address, "plan": plan,
                "input_kind": case.input, "input": str(source), "output": output.rstrip("/"),
                "dead_letter": dead}
        return [sys.executable, str(root / f"{case.source}.py"), json.dumps(spec)]
    name = "process" if case.layout == "decompose" else "pipeline"
    reference = f"userpipe:{name}" if case.source == "module" else f"{root / 'userpipe.py'}:{name}"
    command = [FITWORK, "run", reference, "--input", str(source), "--output", output,
               "--dead-letter", dead, "-q"]
    if plan:
        command += ["--plan", plan]
    if case.layout == "decompose":
        command += ["--decompose"]
    if case.engine != "local":
        command += ["--engine", "ray", "--ray-address", address]
    if case.engine == "ray_tasks":
        command += ["--ray-tasks"]
    return command


def _outputs(case: Case, where: Path) -> list[dict[str, Any]]:
    files = sorted((where / "out").glob("part-*.jsonl")) if case.input == "shards" \
        else [where / "out.jsonl"]
    lines = [line for path in files for line in path.read_text().splitlines() if line]
    return [json.loads(line) for line in lines]


def _ids_in(value: Any) -> set[int]:
    """Every integer held under a key ``id`` or ``ident`` anywhere in a dead letter's input."""
    found: set[int] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("id", "ident") and isinstance(inner, int):
                found.add(inner)
            found |= _ids_in(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            found |= _ids_in(inner)
    return found


@pytest.mark.parametrize("case", all_pairs(), ids=lambda case: case.id)
@pytest.mark.timeout(TIMEOUT + 60)
def test_user_path(case: Case, workspace: Path, tmp_path: Path,
                   request: pytest.FixtureRequest) -> None:
    address = request.getfixturevalue("ray_head").address if case.engine != "local" else ""
    env = request.getfixturevalue("ray_head").env if case.engine != "local" else _clean_env()
    data = workspace
    if case.rows != "clean":
        data = tmp_path / "data"
        data.mkdir()
        (tmp_path / "marks").mkdir()
        _write_inputs(data, _rows(case.rows, tmp_path / "marks"))
    cwd = workspace if case.source == "module" else tmp_path  # a module is found from cwd
    result = _run(_command(case, workspace, data, tmp_path, address), cwd, env)
    said = f"exit {result.returncode}\n{result.stderr[-3000:]}"

    assert result.returncode == (1 if case.rows == "raising" else 0), said
    outputs = _outputs(case, tmp_path)
    ids = [output["id"] for output in outputs]
    assert len(ids) == len(set(ids)), f"outputs doubled: {len(ids) - len(set(ids))}\n{said}"
    assert {output["id"]: output for output in outputs} == _expected(case.rows), said

    dead = tmp_path / "dead.jsonl"
    letters = [json.loads(line) for line in dead.read_text().splitlines()] \
        if dead.exists() else []
    if case.rows == "raising":
        bad = {i for i in range(ROWS) if i % RAISES[0] == RAISES[1]}
        assert len(letters) == len(bad), letters
        assert set().union(*(_ids_in(letter.get("input")) for letter in letters)) >= bad
    else:
        assert letters == [], letters[:2]
    if case.rows == "killing":
        killers = {i for i in range(ROWS) if i % KILLS[0] == KILLS[1]}
        assert {int(p.name) for p in (tmp_path / "marks").iterdir()} == killers, \
            "every killing row killed a worker once"


@pytest.mark.parametrize("input_kind", ["jsonl", "shards"])
@pytest.mark.timeout(TIMEOUT + 60)
def test_rows_that_kill_every_worker_are_dead_lettered_through_the_command_line(
        input_kind: str, workspace: Path, tmp_path: Path) -> None:
    """``fitwork run`` on the local engine over rows three of which kill every worker that
    meets them: each of those rows is dead-lettered as poison, alone and by its id, every
    other row's output is written once, and the run exits 1 naming the failure."""
    rows = _rows()
    poisons = {i for i in range(ROWS) if i % POISONS[0] == POISONS[1]}
    for row in rows:
        if row["id"] in poisons:
            row["fail"] = "poison"
    data = tmp_path / "data"
    data.mkdir()
    _write_inputs(data, rows)
    case = Case("module", "local", "none", input_kind, "poison")
    result = _run(_command(case, workspace, data, tmp_path, ""), workspace, _clean_env())
    said = f"exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert result.returncode == 1, said
    assert "poison" in result.stdout + result.stderr, said
    outputs = {output["id"]: output for output in _outputs(case, tmp_path)}
    assert len(outputs) == len(_outputs(case, tmp_path)), "outputs doubled"
    assert outputs == {k: v for k, v in _expected("clean").items() if k not in poisons}
    letters = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert sorted(letter["kind"] for letter in letters) == ["poison"] * len(poisons), said
    if input_kind == "jsonl":
        assert {letter["input"]["id"] for letter in letters} == poisons
    else:  # a shard's letter names its file and the row in it
        per = ROWS // SHARDS
        assert sorted((Path(letter["input"]["shard"][0]).name, letter["input"]["row"])
                      for letter in letters) == sorted((f"part{i // per}.jsonl", i % per)
                                                       for i in poisons)


def test_decompose_samples_the_rows_of_a_directory_of_shards(workspace: Path) -> None:
    """`fitwork decompose --input DIR` measures on the rows of DIR's data files, as `run
    --decompose --input DIR --output DIR/` hands them to the function, not their paths."""
    done = _run([FITWORK, "decompose", "userpipe:process", "--input", "shards"], workspace,
                _clean_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert "string indices" not in done.stdout + done.stderr
