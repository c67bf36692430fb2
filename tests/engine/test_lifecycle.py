"""Contract tests about what a run leaves behind: processes, shared memory, bounded memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable
from pathlib import Path

import psutil
import pytest

import fitwork
from fitwork import Pipeline, TooManyFailures
from fitwork.engine.local.wire import shm_dir
from tests.engine import units as u

ROOT = Path(__file__).resolve().parents[2]


def fitwork_segments(pids: Iterable[int] | None = None) -> set[str]:
    """Shared-memory frame files (``fitwork-<run>-<pid>-...``), of the processes ``pids`` only
    if given: other runs on the host (other tests, other users of /dev/shm) are not ours."""
    names = {p.name for p in shm_dir().glob("fitwork-*")}
    if pids is None:
        return names
    mine = {str(pid) for pid in pids}
    return {n for n in names if len(n.split("-")) > 2 and n.split("-")[2] in mine}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def segment_size(name: str) -> int:
    try:
        return (shm_dir() / name).stat().st_size
    except FileNotFoundError:
        return 0


@pytest.mark.processes
def test_ctrl_c_leaves_no_process_and_no_shared_memory(engine: str,
                                                       request: pytest.FixtureRequest) -> None:
    before = fitwork_segments()
    address = request.getfixturevalue("ray_cluster").address if engine == "ray" else None
    script = textwrap.dedent(f"""
        import fitwork
        from fitwork import Pipeline
        from tests.engine import units as u
        pipeline = Pipeline(u.make_array, u.pass_array, u.slow_array)
        extra = {{"address": {address!r}}} if {engine!r} == "ray" else {{}}
        with fitwork.run(pipeline, range(10_000), engine={engine!r},
                         workers={{"pass_array": 2}}, **extra) as result:
            for i, _ in enumerate(result):
                if i == 3:
                    print(" ".join(map(str, result.worker_pids())), flush=True)
    """)
    driver = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert driver.stdout is not None
    line = driver.stdout.readline()
    pids = [int(pid) for pid in line.split()]
    assert len(pids) >= 3, driver.stderr.read() if driver.stderr else line
    time.sleep(0.3)  # let frames pile up in shared memory
    if engine == "local":
        assert fitwork_segments() - before, "the run should have had arrays in shared memory"
    driver.send_signal(signal.SIGINT)
    _, err = driver.communicate(timeout=30)
    assert driver.returncode != 0
    assert "KeyboardInterrupt" in err
    time.sleep(0.5)
    assert [pid for pid in pids if alive(pid)] == []
    assert fitwork_segments([*pids, driver.pid]) - before == set()


@pytest.mark.processes
def test_an_aborted_run_leaves_no_process_and_no_shared_memory(engine: str) -> None:
    before = fitwork_segments()
    with (pytest.raises(TooManyFailures),
          fitwork.run(Pipeline(u.fail_with_arrays, u.slow_array), range(200), engine=engine,
                                                          max_failures=5) as result):
        pids = result.worker_pids()
        list(result)
    assert len(pids) == 2
    time.sleep(0.5)
    assert [pid for pid in pids if alive(pid)] == []
    assert fitwork_segments([*pids, os.getpid()]) - before == set()


def test_memory_stays_bounded_with_a_slow_sink(engine: str) -> None:
    pulled = [0]

    def source():
        for i in range(100_000):
            pulled[0] += 1
            yield i

    before = fitwork_segments()
    peak_shm = 0
    peak_ahead = 0
    consumed = 0
    ours = {os.getpid()}  # the files of this run's processes only: a test beside this one
    with fitwork.run(Pipeline(u.make_array, u.pass_array), source(), engine=engine) as result:
        for array in result:  # may be writing its own
            assert array.shape == (300_000,)
            consumed += 1
            time.sleep(0.01)
            ours.update(result.worker_pids())
            shm = sum(segment_size(name) for name in fitwork_segments(ours) - before)
            peak_shm = max(peak_shm, shm)
            peak_ahead = max(peak_ahead, pulled[0] - consumed)
            if consumed == 150:
                break
    print(f"source ahead of the sink by at most {peak_ahead} items, {peak_shm >> 20} MiB")
    # Unbounded, the source would run far ahead (100k items, 240 GB of arrays).
    assert peak_ahead < 1_000, peak_ahead
    assert peak_shm < 200 << 20, peak_shm
    assert fitwork_segments(ours) - before == set()


def test_a_worker_killed_while_it_waits_to_send_leaves_no_file_behind() -> None:
    """A worker blocked on a full channel holds a frame file it has written; once it is
    killed and reaped that file is gone while the run goes on (a long run with many kills
    used to keep one such file per kill in /dev/shm until its end)."""
    pipeline = Pipeline(u.big_output, u.slow_first_byte)  # frames too big to go inline
    with fitwork.run(pipeline, range(150), channel_capacity=2) as result:
        outputs = iter(result)
        got = [next(outputs) for _ in range(10)]
        (pid,) = result.worker_pids("big_output")
        # Reading nothing now fills the channels back to the writer, which waits for a
        # credit with its next frame written: the same held file stays there.
        deadline = time.monotonic() + 10
        held: set[str] = set()
        while not held:
            assert time.monotonic() < deadline, "the writer never waited for a credit"
            before = {n for n in fitwork_segments([pid]) if n.endswith(".w")}
            time.sleep(0.2)
            held = before & fitwork_segments([pid])
        os.kill(pid, signal.SIGKILL)
        while pid in result.worker_pids():  # the driver reaps it as the run goes on
            got.append(next(outputs))
        assert not [n for n in fitwork_segments([pid]) if n.endswith(".w")]
        got.extend(outputs)
    assert sorted(got) == sorted(x % 256 for x in range(150))  # and no item lost or doubled


def test_the_drivers_thread_pools_are_as_they_were_after_a_run() -> None:
    """The driver holds its own BLAS pools while it forks replicas, and only until the run
    ends: the caller's process keeps the pools it had."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    before = [(i["prefix"], i["num_threads"]) for i in threadpoolctl.threadpool_info()]
    with fitwork.run(Pipeline(u.double), range(50)) as result:
        during = [i["num_threads"] for i in threadpoolctl.threadpool_info()]
        assert len(list(result)) == 50
    after = [(i["prefix"], i["num_threads"]) for i in threadpoolctl.threadpool_info()]
    assert after == before
    assert all(n == 1 for n in during)  # held to the one core each replica was given


def test_a_replicas_thread_pools_are_held_to_its_cores() -> None:
    """BLAS would start a thread per host core; a one-core replica uses one core at most."""
    pipeline = Pipeline(u.matrix_work)
    with fitwork.run(pipeline, range(24)) as result:
        assert len(list(result)) == 24
    cpu = result.record.resource("cpu")
    assert cpu.allocated == 1 and 0 < cpu.utilization <= 1.05, cpu
