"""One trial of one layout: a run over the trial's pages, its rates, memory, CPU and outputs.

Every trial at a store latency reads the same pages in the same order, so their run records
are like for like.  A trial stops feeding pages after ``cap_s`` seconds (a safety valve for
a hopeless layout; the trial then says it was capped).  Two rates come from each record:

- ``items_per_s``: the run record's throughput, pages over the run's wall time, startup
  (forking, importing, loading models) and the drain at the end included;
- ``rate``: pages over the time from the first moment a worker started on a page (the
  earliest busy interval of any worker) to the last page out: the same run with the
  processes' startup left out, which is what the demo ranks layouts by, since a short trial
  pays its startup on few pages.  Filling the pipeline and draining it stay in, so a layout
  with many pages in flight is not flattered by its first pages all finishing together.

The host is shared: ``others_cores`` is the CPU the rest of the host used meanwhile (every
core's busy time from ``psutil.cpu_times``, less the workers' and this process's), the
first thing to read when figures move between trials.

`MemoryWatch` sums the resident memory of the run's workers (``RunResult.worker_pids()``)
every ``interval`` seconds while the run goes on: RSS through psutil, and PSS (each shared
page divided among the processes sharing it) from ``/proc/PID/smaps_rollup`` where Linux has
it; forked workers share their parent's pages, which RSS counts once per process.  Each
record gets the order-independent digest of its outputs (`fitwork.OutputDigest`, as
``fitwork run`` writes it), so reports can say whether two runs gave the same outputs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from fitwork import OutputDigest, Progress, RunRecord, run
from fitwork_demo.layouts import Layout
from fitwork_demo.server import DocumentStore

MEMORY_INTERVAL_S = 0.2
DEFAULT_CAP_S = 20.0


def pss_bytes(pid: int) -> int | None:
    """The process's proportional set size in bytes, or ``None`` where it cannot be read."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return None


class MemoryWatch:
    """Peak summed RSS (and PSS) of the processes ``pids()`` lists, sampled in a thread."""

    def __init__(self, pids: Callable[[], Sequence[int]],
                 interval: float = MEMORY_INTERVAL_S) -> None:
        self.pids = pids
        self.interval = interval
        self.peak_rss = 0
        self.peak_pss: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fitwork-demo-memory",
                                        daemon=True)

    def sample(self) -> None:
        """Read every listed process once and keep the peaks of the sums."""
        rss, pss, pss_known = 0, 0, True
        try:
            pids = list(self.pids())
        except Exception:  # the run is ending and cannot list its workers any more
            return
        for pid in pids:
            try:
                rss += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
            value = pss_bytes(pid)
            if value is None:
                pss_known = False
            else:
                pss += value
        if not pids:
            return
        self.samples += 1
        self.peak_rss = max(self.peak_rss, rss)
        if pss_known:
            self.peak_pss = max(self.peak_pss or 0, pss)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@dataclass
class Trial:
    """One run of one layout at one store latency."""

    layout: str
    latency_ms: float
    repeat: int
    record: RunRecord
    outputs: dict[str, list[str]]
    stored: bool
    peak_rss: int
    peak_pss: int | None
    capped: bool
    host_cpu_s: float = 0.0
    driver_cpu_s: float = 0.0
    span_s: float = 0.0
    finished_at: float = field(default_factory=time.time)

    @property
    def items_per_s(self) -> float:
        """Pages per second over the whole run (the record's throughput)."""
        return self.record.throughput

    @property
    def rate(self) -> float:
        """Pages per second with the processes' startup left out (see the module docstring)."""
        return working_rate(self.record)

    @property
    def cores_busy(self) -> float:
        """Worker CPU seconds per wall second: cores the trial kept busy on average."""
        wall = self.record.wall_s
        return sum(u.cpu_s for u in self.record.units) / wall if wall > 0 else 0.0

    @property
    def driver_cores(self) -> float:
        """Cores this process (the engine's driver, the store) kept busy, on average."""
        return self.driver_cpu_s / self.span_s if self.span_s > 0 else 0.0

    @property
    def others_cores(self) -> float:
        """Cores the rest of the host kept busy meanwhile, on average: every core's busy
        time over the trial, less the workers' CPU and this process's."""
        workers = sum(u.cpu_s for u in self.record.units)
        others = self.host_cpu_s - workers - self.driver_cpu_s
        return max(0.0, others / self.span_s) if self.span_s > 0 else 0.0


def working_rate(record: RunRecord) -> float:
    """Items completed over the time from the first busy moment of any worker to the last
    completion; the record's throughput when it says neither."""
    starts = [w.busy_intervals[0][0] for w in record.workers if w.busy_intervals]
    times = record.completions.times_s
    if not starts or not times or times[-1] <= min(starts):
        return record.throughput
    return record.items_completed / (times[-1] - min(starts))


def _busy_seconds(before: Any, after: Any) -> float:
    """CPU seconds every core was busy between two ``psutil.cpu_times()`` readings."""
    def busy(times: Any) -> float:
        return float(sum(times)) - times.idle - getattr(times, "iowait", 0.0)

    return busy(after) - busy(before)


class _Capped:
    """The pages in order, until ``cap_s`` seconds after the first one is taken."""

    def __init__(self, items: Sequence[dict[str, str]], cap_s: float) -> None:
        self.items = items
        self.cap_s = cap_s
        self.capped = False

    def __iter__(self) -> Iterator[dict[str, str]]:
        start = time.monotonic()
        for item in self.items:
            if time.monotonic() - start > self.cap_s:
                self.capped = True
                return
            yield item


def run_trial(layout: Layout, items: Sequence[dict[str, str]], store: DocumentStore,
              latency_ms: float, repeat: int, *, cap_s: float = DEFAULT_CAP_S,
              progress: Callable[[Progress], None] | None = None) -> Trial:
    """Run ``layout`` over ``items`` with the store emptied first; the trial it made."""
    store.clear_texts()
    feed = _Capped(items, cap_s)
    options: dict[str, Any] = {"progress": progress}
    if layout.placement is not None:
        options.update(placement=layout.placement, adapt=layout.adapt)
    else:
        options.update(workers=layout.workers)
    me = psutil.Process()
    host_before, me_before, start = psutil.cpu_times(), me.cpu_times(), time.monotonic()
    digest = OutputDigest()
    outputs: dict[str, list[str]] = {}
    with run(layout.pipeline, feed, **options) as result, \
            MemoryWatch(result.worker_pids) as memory:
        for output in result:
            digest.add(output)
            outputs[output["id"]] = list(output["lines"])
    record = result.record.model_copy(update={"output_digest": digest.hexdigest()})
    host_after, me_after, span = psutil.cpu_times(), me.cpu_times(), time.monotonic() - start
    mine = (me_after.user + me_after.system) - (me_before.user + me_before.system)
    stored = dict(store.texts) == outputs
    return Trial(layout=layout.key, latency_ms=latency_ms, repeat=repeat, record=record,
                 outputs=outputs, stored=stored, peak_rss=memory.peak_rss,
                 peak_pss=memory.peak_pss, capped=feed.capped,
                 host_cpu_s=_busy_seconds(host_before, host_after), driver_cpu_s=mine,
                 span_s=span)
