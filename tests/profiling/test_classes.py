"""Device-aware profiling: the class every figure was measured on comes from discovery."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitwork import InputError, Pipeline, unit
from fitwork.hardware import discover
from fitwork.hardware.catalog import UnknownDeviceClass
from fitwork.hardware.discover import GpuInfo
from fitwork.profiling import PipelineProfile, profile_pipeline
from fitwork.profiling.classes import measured_on, split_classes

H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", "GPU-5b1c0d9e", 80 * 2**30)


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Discovery sees an x86 host without GPUs unless a test says otherwise."""
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(discover.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(discover, "nvml_gpus", lambda: ([], "no NVML (faked)"))
    return monkeypatch


def arm(host: pytest.MonkeyPatch) -> None:
    host.setattr(discover.platform, "machine", lambda: "aarch64")


def one_h100(host: pytest.MonkeyPatch) -> None:
    host.setattr(discover, "nvml_gpus", lambda: ([H100], "NVML lists 1 (faked)"))


@unit
def prepare(x: int) -> int:
    return x + 1


@unit(gpu=0.5, device_bytes=lambda x: 1000.0 * x, device_memory="2GiB")
class Model:
    """Stands in for a model on a GPU; its own clock says 2 ms of device time per item."""

    def __init__(self) -> None:
        self.busy = 0.0

    def __call__(self, x: int) -> int:
        self.busy += 0.002
        return x * 2

    def accelerator_seconds(self) -> float:
        return self.busy


PIPELINE = Pipeline(prepare, Model, name="two")


def test_an_arm_host_profiles_as_the_arm_class(host: pytest.MonkeyPatch) -> None:
    arm(host)
    profile = profile_pipeline(Pipeline(prepare), range(6), samples=6)
    assert profile.host_class == "cpu-arm"
    assert profile.accelerator_class is None
    assert [u.device_class for u in profile.units] == ["cpu-arm"]
    assert "discovered" in profile.classes_from and "aarch64" in profile.classes_from


def test_a_gpu_unit_is_measured_on_the_discovered_gpu_class(host: pytest.MonkeyPatch) -> None:
    one_h100(host)
    profile = profile_pipeline(PIPELINE, range(8), samples=8)
    cpu, gpu = profile.units
    assert (profile.host_class, profile.accelerator_class) == ("cpu-x86", "H100-SXM")
    assert (cpu.device_class, gpu.device_class) == ("cpu-x86", "H100-SXM")
    assert cpu.accel_s is None and cpu.accel_source is None
    assert gpu.accel_s == pytest.approx(0.002) and gpu.accel_source == "declared"
    assert gpu.bound == "accelerator"
    assert gpu.device_bytes == pytest.approx(1000.0 * 4.5)  # mean of 1..8 x 1000
    assert gpu.device_bytes_source == "declared"
    assert (gpu.device_memory, gpu.device_memory_source) == (2 * 2**30, "declared")
    assert "H100-SXM discovered" in profile.classes_from


def test_without_a_gpu_the_gpu_unit_is_measured_on_the_host_class(
        host: pytest.MonkeyPatch) -> None:
    profile = profile_pipeline(PIPELINE, range(4), samples=4)
    gpu = profile.unit("Model")
    assert gpu.device_class == "cpu-x86" and profile.accelerator_class is None
    assert gpu.accel_s is None  # no accelerator: no accelerator timers
    assert gpu.device_bytes_source == "declared" and gpu.device_memory == 2 * 2**30


def test_given_classes_win_and_skip_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("discovery ran although both classes were given")

    monkeypatch.setattr(discover, "discover_local", refuse)
    profile = profile_pipeline(PIPELINE, range(4), samples=4, host_class="arm64",
                               accelerator_class="h100 sxm")
    assert (profile.host_class, profile.accelerator_class) == ("cpu-arm", "H100-SXM")
    assert [u.device_class for u in profile.units] == ["cpu-arm", "H100-SXM"]
    assert profile.classes_from == "host class cpu-arm given; accelerator class H100-SXM given"
    on = measured_on("cpu-x86", discover_accelerator=False)
    assert on.accelerator_class is None


def test_classes_must_be_of_the_right_kind() -> None:
    assert split_classes(["h100-sxm", "cpu-arm"]) == ("cpu-arm", "H100-SXM")
    assert split_classes([]) == (None, None)
    with pytest.raises(InputError, match="two CPU classes"):
        split_classes(["cpu-arm", "cpu-x86"])
    with pytest.raises(InputError, match="two accelerator classes"):
        split_classes(["T4", "L4"])
    with pytest.raises(UnknownDeviceClass, match="did you mean"):
        split_classes(["H10"])
    with pytest.raises(InputError, match="not a CPU class"):
        measured_on("T4")


def _project(tmp_path: Path) -> Path:
    (tmp_path / "p.py").write_text(
        "from fitwork import Pipeline, unit\n"
        "@unit\ndef inc(x):\n    return x + 1\n"
        "@unit(gpu=1)\ndef model(x):\n    return x * 2\n"
        "pipeline = Pipeline(inc, model)\n")
    (tmp_path / "in.jsonl").write_text("".join(f"{i}\n" for i in range(10)))
    return tmp_path


def test_profile_command_records_the_discovered_classes(
        host: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fitwork.cli import main

    arm(host)
    one_h100(host)
    host.chdir(_project(tmp_path))
    done = CliRunner().invoke(main, ["profile", "p.py:pipeline", "--input", "in.jsonl",
                                     "--samples", "4", "-o", "prof.json"])
    assert done.exit_code == 0, done.output
    saved = PipelineProfile.load(tmp_path / "prof.json")
    assert (saved.host_class, saved.accelerator_class) == ("cpu-arm", "H100-SXM")
    assert [u.device_class for u in saved.units] == ["cpu-arm", "H100-SXM"]
    assert "measured on: host class cpu-arm discovered" in done.output


def test_profile_command_takes_device_classes(tmp_path: Path) -> None:
    _project(tmp_path)
    command = [sys.executable, "-m", "fitwork.cli", "profile", "p.py:pipeline", "--input",
               "in.jsonl", "--samples", "3", "-o", "prof.json"]
    done = subprocess.run([*command, "--device-class", "cpu-arm", "--device-class", "L4"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    saved = PipelineProfile.load(tmp_path / "prof.json")
    assert [u.device_class for u in saved.units] == ["cpu-arm", "L4"]
    assert saved.classes_from == "host class cpu-arm given; accelerator class L4 given"
    wrong = subprocess.run([*command, "--device-class", "H10"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0 and "unknown device class 'H10'" in wrong.stderr
