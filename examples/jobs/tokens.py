"""A CPU pipeline with a flat-map (one document to its sentences), named by module in jobs.yaml.

A sentence whose text is ``"kill"`` kills its worker (SIGKILL): the run must cost that row
only, dead-lettered as poison, and touch no other pipeline of the fleet.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

from fitwork import Pipeline, unit

WORK = int(os.environ.get("TOKENS_WORK", "20000"))
"""Loop steps per sentence in `count`: pure Python, about 1.5 ms."""


@unit
def sentences(item: dict) -> Iterator[dict]:
    """Each sentence of the document (a flat-map)."""
    for n, text in enumerate(str(item["text"]).split(".")):
        if text.strip():
            yield {"doc": item["id"], "n": n, "text": text.strip()}


@unit
def count(item: dict) -> dict:
    """Letter counts of a sentence, the slow way (the CPU stage)."""
    if item["text"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    total = 0
    for step in range(WORK):
        total += ord(item["text"][step % len(item["text"])])
    return {"doc": item["doc"], "n": item["n"], "total": total}


pipeline = Pipeline(sentences, count, name="tokens")
