"""Shared fixtures: the engines every contract test runs against."""

from __future__ import annotations

import pytest

ENGINES = ["local"]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Name of the engine under test."""
    return request.param
