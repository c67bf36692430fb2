"""A unit that does its work in a child process is measured with that CPU, not as waiting."""

from __future__ import annotations

import subprocess
import sys

from fitwork import Pipeline, unit
from fitwork.profiling import profile_pipeline

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.03: pass\n"


@unit
def shell_out(x: int) -> int:
    """Runs a tool in a child process that works a core for ~30 ms (as gzip or ffmpeg)."""
    subprocess.run([sys.executable, "-S", "-c", SPIN], check=True)
    return x


def test_a_unit_that_shells_out_is_profiled_with_its_childrens_cpu() -> None:
    profile = profile_pipeline(Pipeline(shell_out, name="shells"), list(range(6)), samples=6,
                               loaded=False)
    (measured,) = profile.units
    print(f"cpu {measured.cpu_s:.4f} s, wall {measured.wall_s:.4f} s per item")
    # each call's child spins 30 ms of its own CPU; counted without it, the unit read as
    # waiting (cpu a few ms against a wall of 40 ms or more)
    assert measured.cpu_s >= 0.03
    assert measured.cpu_s >= 0.6 * measured.wall_s


def test_a_run_counts_its_units_childrens_cpu() -> None:
    import fitwork

    with fitwork.run(Pipeline(shell_out, name="shells"), list(range(8))) as result:
        assert sorted(result) == list(range(8))
    (used,) = [u.cpu_s for u in result.record.units if u.name == "shell_out"]
    print(f"record: shell_out used {used:.3f} CPU s for 8 items")
    assert used >= 8 * 0.03
