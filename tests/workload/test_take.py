"""`Pipeline.take`: a quick look that pulls no more source items than it needs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fitwork import InputError, Pipeline, unit


@unit
def words(line: str) -> Iterator[str]:
    yield from line.split()


@unit(kind="filter")
def long(word: str) -> bool:
    return len(word) > 3


@unit
def maybe_upper(word: str) -> str | None:
    return None if word.startswith("q") else word.upper()


def test_take_pulls_only_the_source_items_it_needs_and_keeps_map_nones() -> None:
    pulled: list[str] = []

    def lines() -> Iterator[str]:
        for line in ["the quick brown fox", "jumps over the lazy dog", "never read"]:
            pulled.append(line)
            yield line

    pipeline = Pipeline(words, long, maybe_upper, name="look")
    # A map that returns None gives None (written as null); only a filter drops an item.
    assert pipeline.take(lines(), 3) == [None, "BROWN", "JUMPS"]
    assert pulled == ["the quick brown fox", "jumps over the lazy dog"]
    assert pipeline.take(["a b"], 5) == []
    assert pipeline.take(lines(), 0) == []
    with pytest.raises(InputError, match=r"take\(-1\)"):
        pipeline.take([], -1)
