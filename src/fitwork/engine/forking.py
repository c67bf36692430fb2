"""What a forked child does first, on every engine: die with its parent, fresh stdio locks."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1


def after_fork() -> None:
    """In a child just forked: receive SIGKILL when the thread that forked it ends (the
    parent process, or the thread inside it that forked), and write to standard output and
    error through new streams (a lock another thread held at the fork stays held in the
    child's copy of the old ones)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - kept for the child
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


__all__ = ["after_fork"]
