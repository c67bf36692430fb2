"""The profiler, on real units in real child processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fitwork import InputError, Pipeline, unit
from fitwork.profiling import PipelineProfile, profile_pipeline
from fitwork.profiling.profiler import ProfileError


@unit(io=4)
def wait_io(x: int) -> int:
    time.sleep(0.01)
    return x


@unit
def burn(x: int) -> np.ndarray:
    deadline = time.process_time() + 0.005
    while time.process_time() < deadline:
        pass
    return np.zeros(1000) + x


@unit(batch_size=16, flops=2e6)
def batched(batch: list[np.ndarray]) -> list[float]:
    return [float(a.sum()) for a in batch]


@unit(kind="filter")
def half(x: float) -> bool:
    return int(x / 1000) % 2 == 0


@unit
def always_fails(x: int) -> int:
    raise ValueError("no")


def test_profiles_tell_io_from_cpu_and_record_shapes() -> None:
    pipeline = Pipeline(wait_io, burn, batched, half)
    profile = profile_pipeline(pipeline, range(40), samples=32)
    io, cpu, model, keep = profile.units
    assert io.bound == "io" and io.wall_s >= 0.01 and io.cpu_share < 0.5
    assert cpu.bound == "cpu" and cpu.cpu_s >= 0.005
    assert cpu.bytes_out > 8000 > cpu.bytes_in
    assert [b.batch_size for b in model.batches] == [1, 2, 8, 16]
    assert model.flops == 2e6 and model.flops_source == "declared"
    assert keep.output_ratio == pytest.approx(0.5)
    assert all(u.samples == 32 for u in profile.units)


def test_profile_round_trip_and_mismatch(tmp_path: Path) -> None:
    pipeline = Pipeline(burn, batched)
    profile = profile_pipeline(pipeline, range(8), samples=8)
    profile.save(tmp_path / "p.json")
    loaded = PipelineProfile.load(tmp_path / "p.json")
    assert loaded == profile
    loaded.check_matches(["burn", "batched"])
    with pytest.raises(InputError, match="not the pipeline's units"):
        loaded.check_matches(["burn", "other"], source="p.json")
    (tmp_path / "bad.json").write_text(json.dumps({"pipeline": 3}))
    with pytest.raises(InputError, match="not a fitwork profile"):
        PipelineProfile.load(tmp_path / "bad.json")


def test_a_unit_that_always_fails_cannot_be_profiled() -> None:
    with pytest.raises(ProfileError, match=r"always_fails.*failed on all 4 samples"):
        profile_pipeline(Pipeline(always_fails), range(4), samples=4)


def test_profile_command(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(
        "from fitwork import Pipeline, unit\n"
        "@unit\ndef inc(x):\n    return x + 1\n"
        "@unit\ndef double(x):\n    return 2 * x\n"
        "pipeline = Pipeline(inc, double)\n")
    (tmp_path / "in.jsonl").write_text("".join(f"{i}\n" for i in range(10)))
    done = subprocess.run([sys.executable, "-m", "fitwork.cli", "profile", "p.py:pipeline",
                           "--input", "in.jsonl", "--samples", "5", "-o", "prof.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    saved = PipelineProfile.load(tmp_path / "prof.json")
    assert saved.units[0].name == "inc" and saved.units[0].samples == 5
    # the fused replica's memory is measured, and said; the host's speed is read
    assert saved.fused_rss is not None
    assert saved.host_speed is not None and saved.host_speed > 0
    assert "one process running every unit in turn held" in done.stdout
