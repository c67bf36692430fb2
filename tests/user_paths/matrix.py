"""The user-path matrix: every pair of choices a user makes, covered by a few whole cases.

A case picks a pipeline source, an engine, a layout, an input and the kind of rows.  Not
every combination exists (a ``__main__`` script has no reference for ``--decompose``; Ray
task replicas run a pipeline of one stateless unit, which only a fused plan makes, and no
sink), so the cases are chosen greedily from the valid combinations until every pair of
values that some valid case holds is held by a chosen one (all-pairs coverage).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

SOURCES = ("module", "file", "main_plain", "main_unit", "main_class")
ENGINES = ("local", "ray", "ray_tasks")
LAYOUTS = ("none", "split", "fused", "decompose")
INPUTS = ("jsonl", "csv", "parquet", "shards")
ROWS = ("clean", "raising", "killing")


class Case(NamedTuple):
    """One user path: where the pipeline is written, where and how it runs, on what."""

    source: str
    engine: str
    layout: str
    input: str
    rows: str

    @property
    def id(self) -> str:
        return "-".join(self)


def valid(case: Case) -> bool:
    """Whether a user can take this path at all."""
    if case.layout == "decompose" and case.source not in ("module", "file"):
        return False  # decomposition reads a named function: the CLI's reference
    # task replicas: one stateless unit (a fused plan), and no sink
    return case.engine != "ray_tasks" or (case.layout == "fused" and case.input != "shards")


def _pairs(case: Case) -> set[tuple[int, str, int, str]]:
    return {(i, case[i], j, case[j]) for i, j in itertools.combinations(range(len(case)), 2)}


def all_pairs() -> list[Case]:
    """Valid cases, few, that together hold every pair some valid case holds."""
    candidates = [Case(*values) for values in
                  itertools.product(SOURCES, ENGINES, LAYOUTS, INPUTS, ROWS)]
    candidates = [case for case in candidates if valid(case)]
    wanted = set().union(*(_pairs(case) for case in candidates))
    chosen: list[Case] = []
    while wanted:
        best = max(candidates, key=lambda case: len(_pairs(case) & wanted))
        chosen.append(best)
        wanted -= _pairs(best)
    return chosen
