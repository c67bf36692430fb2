"""Process samples in the run record, bounded growth over a run, and the memory watchdog."""

from __future__ import annotations

import os
import signal
import time

import fitwork
from fitwork import Pipeline, unit
from fitwork.engine.options import LocalOptions
from fitwork.telemetry.processes import MOST_SAMPLES, ProcessBook, Worker
from fitwork.telemetry.record import ProcessSample

MiB = 1 << 20
DRIVER_FDS_PER_WORKER = 3


@unit(cpu=0.5)
def square(x: int) -> int:
    return x * x


@unit(cpu=0.5)
def pad(x: int) -> list[int]:
    return [x] * 64  # a few hundred bytes per item through the channels


@unit(memory="150MiB")
def greedy(x: int) -> int:
    if x == 13:  # holds 400 MiB for a while: the watchdog must stop it
        block = bytearray(400 * MiB)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(3)
    return x


def test_a_long_run_with_deaths_and_a_slow_reader_stays_flat() -> None:
    pipeline = Pipeline(square, pad, name="soak")
    items = 120_000
    got = 0
    killed: set[int] = set()
    with fitwork.run(pipeline, range(items), workers={"square": 2, "pad": 2},
                     sample_interval=0.1) as result:
        for got, _ in enumerate(result, 1):
            if got % 20_000 == 10_000:
                time.sleep(0.5)  # a slow sink: the pipeline backs up behind it
                alive = [p for p in result.worker_pids("pad") if p not in killed]
                if alive:
                    os.kill(alive[0], signal.SIGKILL)
                    killed.add(alive[0])
    record = result.record
    assert got == items and len(killed) >= 4 and record.worker_restarts >= 2
    samples = record.process_samples
    assert len(samples) >= 5 and all(s.driver_rss > 0 for s in samples)
    # 4 workers, and pad's spares once it lost one, when a sample falls after the zygote
    # handed them over (a 0.1 s sample can miss one): LocalOptions().spares, one more for each
    # of pad's 2 replicas where deaths came closer than its zygote forks
    # (`LocalRun.spares_wanted`; 20,000 light items pass in less). Never more.
    most = max(s.workers for s in samples[:-1])
    assert 4 <= most <= 4 + LocalOptions().spares + 2
    third = len(samples) // 3
    early, late = samples[:third], samples[-third - 1:-1]
    # the driver's memory, open files and threads do not grow with the items it has seen
    # (its memory swings with the outputs waiting for the slow reader, within a bound)
    assert max(s.driver_rss for s in late) <= 1.5 * max(s.driver_rss for s in early) + 32 * MiB
    # open files: each worker process costs the driver a few (its sentinel, the spare's hand-over
    # pipe and pidfd: 3 measured on this host), so a spare that joins late is not a leak; what is
    # left must stay flat (a leak of one per death would add 4 over the late deaths)
    def driver_own(sample: ProcessSample) -> int:
        return sample.driver_fds - DRIVER_FDS_PER_WORKER * sample.workers

    assert max(driver_own(s) for s in late) <= max(driver_own(s) for s in early) + 3
    assert max(s.driver_threads for s in late) <= max(s.driver_threads for s in early) + 2
    # per worker process: a unit that lost a worker keeps a spare from then on, one more
    # process, whose sentinel and hand-over pipe each worker forked after it inherits (2)
    def fds(sample: ProcessSample) -> float:
        return sample.worker_fds / max(1, sample.workers)

    assert max(fds(s) for s in late) <= max(fds(s) for s in early) + 3
    final = samples[-1]  # taken after the run let everything go
    assert final.workers == 0 and final.shm_bytes == 0


def test_a_replica_over_its_declared_memory_is_stopped_and_its_item_dead_lettered(
        tmp_path: object) -> None:
    dead = f"{tmp_path}/dead.jsonl"
    pipeline = Pipeline(greedy, name="greedy")
    with fitwork.run(pipeline, range(20), dead_letter=dead, max_failures=1,
                     sample_interval=0.1) as result:
        outputs = sorted(result)
    assert outputs == [x for x in range(20) if x != 13]
    record = result.record
    assert record.failures == 1 and record.status == "completed"
    (failure,) = record.failed_items
    assert failure.item == 13 and failure.kind == "poison"
    assert "memory watchdog" in failure.error and "'greedy' declares" in failure.error


def test_the_book_keeps_a_bounded_record_of_a_long_run() -> None:
    book = ProcessBook(t0=0.0, interval=0.5)
    me = Worker(worker=1, unit="u", pid=os.getpid(), memory=1)
    undeclared = Worker(worker=1, unit="u", pid=os.getpid(), memory=0)  # never read for PSS
    now = 0.0
    for _ in range(3 * MOST_SAMPLES):
        book.take(now, [undeclared], None)
        now = book.next
    assert len(book.samples) < MOST_SAMPLES and book.interval > 0.5
    assert book.samples[-1].t_s > book.samples[0].t_s
    assert book.over_memory == []  # a worker that declares no memory is never over it
    # a worker holding more than it declares (of its own) is named
    book.take(now, [me], None)
    assert book.over_memory and book.over_memory[0][0] == me
    book.take(now, [Worker(worker=2, unit="u", pid=os.getpid(), memory=1 << 40)], None)
    assert book.over_memory == []
