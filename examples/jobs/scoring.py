"""A CPU pipeline of three stages (parse, featurize, score), named by file path in jobs.yaml."""

from __future__ import annotations

import hashlib
import os

from fitwork import Pipeline, unit

ROUNDS = int(os.environ.get("SCORING_ROUNDS", "8000"))
"""Hash rounds per item in `featurize`: about 8 ms of one core on this project's 2-core host."""


@unit
def parse(item: dict) -> dict:
    """The record's text as bytes, and its id."""
    return {"id": item["id"], "text": str(item["text"]).encode()}


@unit
def featurize(item: dict) -> dict:
    """A chain of hashes over the text: the CPU-heavy stage."""
    digest = item["text"]
    for _ in range(ROUNDS):
        digest = hashlib.sha256(digest).digest()
    return {"id": item["id"], "feature": digest[:8].hex()}


@unit
def score(item: dict) -> dict:
    """A score from the feature."""
    return {"id": item["id"], "score": int(item["feature"], 16) % 1000}


pipeline = Pipeline(parse, featurize, score, name="scoring")
