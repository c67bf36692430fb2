"""Test helper: keep this thread's CPU busy for a given time."""

from __future__ import annotations

import time


def spin(seconds: float) -> None:
    """Spin until this thread has used ``seconds`` of its own CPU time."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass
