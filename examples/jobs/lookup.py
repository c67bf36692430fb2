"""An I/O-bound pipeline: a lookup that waits on a slow service (a sleep), then light work."""

from __future__ import annotations

import os
import time

from fitwork import Pipeline, unit

WAIT_S = float(os.environ.get("LOOKUP_WAIT_S", "0.02"))
"""Seconds each lookup waits, as a remote store would."""


@unit(io=8)
def fetch(item: dict) -> dict:
    """Look the item up (waits WAIT_S, uses almost no CPU)."""
    time.sleep(WAIT_S)
    return {"id": item["id"], "value": len(str(item["text"]))}


@unit
def tally(item: dict) -> dict:
    """A little CPU work on the answer."""
    return {"id": item["id"], "value": sum(range(item["value"] * 400))}


pipeline = Pipeline(fetch, tally, name="lookup")
