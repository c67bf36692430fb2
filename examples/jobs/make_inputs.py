"""Write the three jobs' inputs (JSON Lines) beside this file: `python make_inputs.py [N]`."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

WORDS = ("fleet", "unit", "replica", "core", "device", "plan", "share", "team", "queue")


def write(path: Path, count: int, sentences: int, seed: int, poison: int | None = None) -> None:
    """``count`` documents of ``sentences`` sentences each; ``poison`` gets a killer."""
    rng = random.Random(seed)
    with path.open("w") as out:
        for i in range(count):
            parts = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(sentences)]
            if i == poison:
                parts[1] = "kill"
            out.write(json.dumps({"id": i, "text": ". ".join(parts)}) + "\n")


def main(count: int) -> None:
    """The inputs of jobs.yaml: scoring, tokens (one killing row) and lookup."""
    here = Path(__file__).parent
    write(here / "scoring.jsonl", count, 1, 1)
    write(here / "tokens.jsonl", count // 2, 6, 2, poison=7)
    write(here / "lookup.jsonl", count, 1, 3)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
