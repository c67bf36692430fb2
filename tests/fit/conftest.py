"""Fixtures of the fit's tests that read this host: a process of this session spinning."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest


@pytest.fixture
def spinner() -> Iterator[subprocess.Popen[bytes]]:
    """One process of this session keeping a core busy, as a user's other job would."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
