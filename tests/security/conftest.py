"""Shared helpers for the trust-model tests: the CLI in a subprocess, and a small pipeline."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PIPELINE = textwrap.dedent("""
    from fitwork import Pipeline, unit

    @unit(cpu=0.5)
    def parse(row):
        return int(row["n"]) if isinstance(row, dict) else len(str(row))

    @unit(cpu=0.5)
    def square(n):
        if n == 13:
            raise ValueError("thirteen is refused")
        return {"n": n, "square": n * n}

    pipeline = Pipeline(parse, square, name="squares")
""")


def run_cli(*args: str | Path, cwd: Path, umask: int | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``fitwork ARGS`` in a subprocess, under ``umask`` when given."""
    def set_umask() -> None:
        if umask is not None:
            os.umask(umask)

    return subprocess.run([sys.executable, "-m", "fitwork.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=set_umask)


def assert_one_error_line(done: subprocess.CompletedProcess[str], *names: str) -> str:
    """The run failed with exactly one ``error: ...`` line on stderr naming ``names``."""
    assert done.returncode != 0, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the squares pipeline and 20 input rows."""
    (tmp_path / "squares.py").write_text(PIPELINE)
    (tmp_path / "in.jsonl").write_text("".join(f'{{"n": {i}}}\n' for i in range(20)))
    return tmp_path
