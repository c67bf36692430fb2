"""Samples that kill the process measuring a unit: left out, said, and fatal only when no
sample survives.  Run as a user does: `fitwork profile` in a subprocess, on a pipeline file
whose unit SIGKILLs its own process on some rows (as a native decoder that segfaults)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

FITWORK = str(Path(sys.executable).with_name("fitwork"))

PIPELINE = textwrap.dedent('''
    import os
    import signal
    from pathlib import Path

    import fitwork


    def decode(row):
        if row["fail"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if row["fail"].startswith("once:"):  # kills the first time only (a marker file)
            mark = Path(row["fail"][len("once:"):]) / str(row["id"])
            if not mark.exists():
                mark.touch()
                os.kill(os.getpid(), signal.SIGKILL)
        return {"id": row["id"], "y": row["x"] * 2}


    def label(item):
        return {**item, "tag": "big" if item["y"] > 5 else "small"}


    pipeline = fitwork.Pipeline(decode, label, name="killing")
''')


def _profile(tmp_path: Path, fails: dict[int, str], rows: int = 12
             ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pipe.py").write_text(PIPELINE)
    with open(tmp_path / "in.jsonl", "w") as f:
        for i in range(rows):
            f.write(json.dumps({"id": i, "x": i / 2, "fail": fails.get(i, "")}) + "\n")
    return subprocess.run([FITWORK, "profile", str(tmp_path / "pipe.py:pipeline"), "--input",
                           str(tmp_path / "in.jsonl"), "--samples", str(rows),
                           "-o", str(tmp_path / "profile.json")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)


def test_samples_that_kill_are_left_out_and_counted(tmp_path: Path) -> None:
    done = _profile(tmp_path, {0: "kill", 5: "kill", 11: "kill"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "profile: unit 'decode' killed its process" in done.stderr
    assert "on 3 of 12 samples (numbers 0, 5, 11): measured on the other 9" in done.stderr
    units = {u["name"]: u for u in json.loads((tmp_path / "profile.json").read_text())["units"]}
    assert units["decode"]["samples"] == 12 and units["decode"]["failures"] == 3
    assert units["decode"]["output_ratio"] == 1.0  # of the samples it survived
    assert units["label"]["samples"] == 9  # measured on what decode made of the rest
    assert units["label"]["failures"] == 0


def test_a_death_that_does_not_repeat_leaves_nothing_out(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    done = _profile(tmp_path, {3: f"once:{marks}"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "and on no sample again when each ran alone: measured on all 12" in done.stderr
    units = {u["name"]: u for u in json.loads((tmp_path / "profile.json").read_text())["units"]}
    assert units["decode"]["failures"] == 0 and units["label"]["samples"] == 12


def test_a_unit_no_sample_survives_fails_the_profile_in_one_line(tmp_path: Path) -> None:
    done = _profile(tmp_path, dict.fromkeys(range(4), "kill"), rows=4)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: profile: unit 'decode' killed its process on every "
                                "one of the 4 samples"), done.stderr[-2000:]
    assert "give samples it survives" in lines[-1]
    assert not (tmp_path / "profile.json").exists()
