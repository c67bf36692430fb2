"""The share probe's processes work one window together, however slowly they were forked."""

from __future__ import annotations

import multiprocessing
import time

from fitwork.profiling.shares import _work


def test_a_probe_process_waits_for_the_common_start_and_times_its_window_from_it() -> None:
    # Forking a large profiler takes milliseconds a process; a probe that began at its own
    # fork would run alone for part of the window and read more of the host than k get.
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_work, args=(0.1, 1.0, go, send), daemon=True)
    process.start()
    send.close()
    try:
        time.sleep(0.4)
        assert not receive.poll(0), "the probe worked before the common start"
        go.set()
        assert receive.poll(10)
        cpu, wall = receive.recv()
    finally:
        process.join(10)
    assert 0.09 <= wall < 0.3, wall  # its window only, not the wait before it
    assert 0 < cpu <= wall + 0.02
