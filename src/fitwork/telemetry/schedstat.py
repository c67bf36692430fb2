"""How long this process has waited for a core: the kernel's run-queue time."""

from __future__ import annotations

import os

_opened: tuple[int, int] | None = None  # (pid, descriptor): a forked child opens its own


def run_queue_seconds() -> float:
    """Seconds this process's main thread has waited in the kernel's run queue, runnable
    but without a core (0 where the kernel does not report it).  The file stays open and is
    read again from its start: a replica reads it with every frame it reports."""
    global _opened
    try:
        if _opened is None or _opened[0] != os.getpid():
            _opened = (os.getpid(), os.open("/proc/self/schedstat", os.O_RDONLY))
        return int(os.pread(_opened[1], 256, 0).split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0
