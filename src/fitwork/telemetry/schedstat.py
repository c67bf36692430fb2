"""How long this process has waited for a core: the kernel's run-queue time."""

from __future__ import annotations


def run_queue_seconds() -> float:
    """Seconds this process's main thread has waited in the kernel's run queue, runnable
    but without a core (0 where the kernel does not report it)."""
    try:
        with open("/proc/self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0
