"""Files and folders fitwork writes get the user's umask and nothing broader."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from .conftest import run_cli


def modes(root: Path) -> dict[str, tuple[str, int]]:
    """Every file and folder under ``root``: relative path -> (kind, permission bits)."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
        found[str(path.relative_to(root))] = (kind, stat.S_IMODE(info.st_mode))
    return found


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=["umask022", "umask077"])
def test_everything_written_follows_the_umask(project: Path, umask: int) -> None:
    pytest.importorskip("pyarrow")
    out = project / "out"

    def ok(*args: str) -> None:
        done = run_cli(*args, cwd=project, umask=umask)
        assert done.returncode == 0, done.stdout + done.stderr

    ok("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "out/run/outputs.jsonl",
       "--record", "out/run/record.json", "--max-failures", "5", "-q")
    ok("run", "squares.py:pipeline", "--input", "in.jsonl", "--output",
       "out/pq/deep/outputs.parquet", "--dead-letter", "out/dl/failed.jsonl",
       "--record", "out/pq/record.json", "--max-failures", "5", "-q")
    ok("profile", "squares.py:pipeline", "--input", "in.jsonl", "--samples", "4",
       "--output", "out/prof/profile.json")
    ok("plan", "squares.py:pipeline", "--profile", "out/prof/profile.json", "--time-limit", "5",
       "--output", "out/plans/plan.json")
    ok("report", "out/run/record.json", "out/pq/record.json", "--plan", "out/plans/plan.json",
       "-o", "out/reports/report.html")
    ok("fleet", "local", "--output", "out/fleet.yaml")

    written = modes(out)
    expected_files = {"run/outputs.jsonl", "run/outputs.jsonl.dead-letters.jsonl",
                      "run/record.json", "pq/deep/outputs.parquet", "dl/failed.jsonl",
                      "pq/record.json", "prof/profile.json", "plans/plan.json",
                      "reports/report.html", "fleet.yaml"}
    assert {p for p, (kind, _) in written.items() if kind == "file"} == expected_files
    for path, (kind, mode) in written.items():
        allowed = (0o777 if kind == "dir" else 0o666) & ~umask
        assert mode == allowed, f"{path}: {mode:04o}, expected {allowed:04o} under umask " \
                                f"{umask:03o}"
    # the run created no stray file beside its input either
    assert {p.name for p in project.iterdir()} == {"squares.py", "in.jsonl", "out"}


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=["umask022", "umask077"])
def test_journals_and_parts_follow_the_umask(project: Path, umask: int) -> None:
    """A run stopped by a failure keeps its journal (and a Parquet output's parts) for
    --resume: those files get the umask too."""
    pytest.importorskip("pyarrow")
    # the refused row last, after 2,000 good ones: items are done (so the journal is kept)
    # before the failure stops the run, however the host's load orders them
    (project / "in.jsonl").write_text(
        "".join(f'{{"n": {i}}}\n' for i in range(100, 2100)) + '{"n": 13}\n')
    for output in ("out/kept/o.jsonl", "out/kept/o.parquet"):
        done = run_cli("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", output,
                       "--max-failures", "0", "-q", cwd=project, umask=umask)
        assert done.returncode == 1 and "more than max_failures=0" in done.stderr, done.stderr
    written = modes(project / "out")
    assert written["kept/o.jsonl.journal/journal.jsonl"][0] == "file"
    assert written["kept/o.parquet.journal/journal.jsonl"][0] == "file"
    assert written["kept/o.parquet.parts"][0] == "dir"
    for path, (kind, mode) in written.items():
        allowed = (0o777 if kind == "dir" else 0o666) & ~umask
        assert mode == allowed, f"{path}: {mode:04o}, expected {allowed:04o} under umask " \
                                f"{umask:03o}"
