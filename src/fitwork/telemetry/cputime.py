"""This process's CPU seconds with its finished children's: where a unit that shells out works."""

from __future__ import annotations

import resource
import time


def children_seconds() -> float:
    """CPU seconds of the child processes this process has waited for (one system call, about
    a microsecond: read it around a pass of calls, not around each call of a light unit)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def cpu_seconds() -> float:
    """CPU seconds of this process and of the child processes it has waited for.

    A unit that runs a tool in a child process (``subprocess.run(["gzip", ...])``, ffmpeg,
    tesseract) spends its CPU there, where ``time.process_time`` does not look: a profile
    that counted only the unit's own process read such a unit as waiting, and its plan
    counted on cores the children were using.  A child counts once waited for
    (``subprocess.run`` waits); one still running is not counted yet.
    """
    return time.process_time() + children_seconds()


__all__ = ["children_seconds", "cpu_seconds"]
