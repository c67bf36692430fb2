"""ray_engines.py's tally: the process tree's CPU, the contenders, and the report."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil


class TreeCPU:
    """CPU-seconds of this process and every descendant (Ray's processes, the helper and
    their workers), read every 20 ms so a process that exits keeps what it last showed."""

    def __init__(self) -> None:
        self.root = psutil.Process()
        self.seen: dict[tuple[int, float], float] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._loop, daemon=True, name="tree-cpu").start()

    def _loop(self) -> None:
        while True:
            self.read()
            time.sleep(0.02)

    def read(self) -> float:
        """The tree's CPU-seconds so far (processes gone included, as last seen)."""
        with self.lock:
            for process in [self.root, *self.root.children(recursive=True)]:
                try:
                    with process.oneshot():
                        times = process.cpu_times()
                        self.seen[(process.pid, process.create_time())] = \
                            times.user + times.system
                except psutil.Error:
                    continue
            return sum(self.seen.values())


CPU: list[TreeCPU] = []


@dataclass
class Contender:
    """One way to run a pipeline, with the configuration printed beside its figure.

    ``prepare`` runs untimed right before each timed run (a cold-pool contender runs actors
    there).  Rates and CPU-seconds are kept per order: ``ABC`` (the list's order) and
    ``CBA`` (reversed)."""

    name: str
    config: str
    run: Callable[[], float | tuple[float, float]]  # the total, or (total, seconds taken)
    prepare: Callable[[], Any] | None = None
    rates: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    steady: list[tuple[float, float]] = field(default_factory=list)
    totals: list[float] = field(default_factory=list)

    def best(self, order: str | None = None) -> tuple[float, float]:
        """The best items/s (of one order, or of all) and that run's CPU-seconds."""
        runs = [(rate, cpu) for o in ([order] if order else list(self.rates))
                for rate, cpu in zip(self.rates.get(o, []), self.cpu.get(o, []), strict=True)]
        return max(runs) if runs else (0.0, 0.0)

    def orders(self) -> tuple[tuple[str, float, float], tuple[str, float, float]]:
        """(order, best items/s, its CPU-s) for the better order and the worse."""
        found = sorted(((*self.best(o), o) for o in self.rates), reverse=True)
        better, worse = found[0], found[-1]
        return (better[2], better[0], better[1]), (worse[2], worse[0], worse[1])


def report(title: str, contenders: list[Contender]) -> None:
    """items/s and CPU-s of each contender in its better order and its worse, with its
    configuration; the same plan on one-node Ray against local; then the ratios against the
    best Ray Data: fitwork's per-item units, and its best batched units (the like-for-like
    contender: Ray Data's stages are vectorised too)."""
    best = {c.name: c.best()[0] for c in contenders}
    ray_data = [c for c in contenders if c.name.startswith("ray data")]
    strongest = max(ray_data, key=lambda c: best[c.name])
    print(title)
    print(f"  {'':<34} {'better order':>22} {'worse order':>22}")
    print(f"  {'':<34} {'items/s':>12} {'CPU-s':>9} {'items/s':>12} {'CPU-s':>9}")
    for c in contenders:
        mark = "  <- best Ray Data" if c is strongest else ""
        (good, rate, cpu), (bad, low, low_cpu) = c.orders()
        print(f"  {c.name:<34} {rate:>8,.0f} {good} {cpu:>9.2f} {low:>8,.0f} {bad} "
              f"{low_cpu:>9.2f}  {c.config}{mark}")
    named = {c.name: c for c in contenders}
    ray, local = named["fitwork ray planned"], named["fitwork local planned"]
    for label, pick in (("better", 0), ("worse", 1)):
        r, loc = ray.orders()[pick], local.orders()[pick]
        print(f"  the same plan, one-node Ray / local ({label} order of each): items/s "
              f"{r[1] / loc[1]:.2f}x ({r[1]:,.0f} vs {loc[1]:,.0f}), CPU-s {r[2]:.2f} vs "
              f"{loc[2]:.2f} ({r[2] / max(loc[2], 1e-9):.2f}x)  (aim >= 0.8x items/s)")
    if ray.steady and local.steady:
        (r_first, r_rate), (l_first, l_rate) = max(ray.steady, key=lambda f: f[1]), \
            max(local.steady, key=lambda f: f[1])
        print(f"  past start-up (first settled frame to last), best runs: Ray {r_rate:,.0f} "
              f"items/s vs local {l_rate:,.0f} ({r_rate / max(l_rate, 1e-9):.2f}x); first "
              f"frame settled at {r_first:.2f} s vs {l_first:.2f} s")
    warm, cold = named["fitwork ray planned, tasks"], named["fitwork ray planned, tasks, cold"]
    print(f"  task replicas, warm pool (after Ray Data) {warm.best('ABC')[0]:,.0f} items/s, "
          f"cold pool (right after actors) {cold.best()[0]:,.0f} (worse order "
          f"{cold.orders()[1][1]:,.0f})")
    baseline = best[strongest.name]
    print(f"  fitwork ray, as planned with task replicas / best ray data: "
          f"{best['fitwork ray planned, tasks'] / baseline:.2f}x  (issue 14 aim >= 1.5x; a "
          "plan that fuses every stage runs as tasks, one that does not keeps its actors)")
    for engine in ("ray", "local"):
        print(f"  fitwork {engine}, as planned / best ray data: "
              f"{best[f'fitwork {engine} planned'] / baseline:.2f}x  (issue 14 aim >= 1.5x on "
              "Ray)")
        per_item = best[f"fitwork {engine}"]
        batched = max((c for c in contenders if c.name.startswith(f"fitwork {engine} batch=")),
                      key=lambda c: best[c.name], default=None)
        print(f"  fitwork {engine}, per-item units / best ray data ({strongest.name}): "
              f"{per_item / baseline:.2f}x")
        if batched is not None:
            print(f"  fitwork {engine}, best batched ({batched.name.split(' ', 2)[2]}) / best "
                  f"ray data: {best[batched.name] / baseline:.2f}x")
