"""Byte sizes and data rates: parsed from the forms people write, written back exactly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fitwork.hardware.units import (
    format_bytes,
    format_rate,
    human_bytes,
    human_rate,
    parse_bytes,
    parse_rate,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64GiB", 64 * 2**30),
        ("64 GiB", 64 * 2**30),
        ("64Gi", 64 * 2**30),
        ("2TB", 2 * 10**12),
        ("1.5GB", 1_500_000_000),
        ("512MiB", 512 * 2**20),
        ("128gb", 128 * 10**9),
        ("4096", 4096),
        (4096, 4096),
        (8.0, 8),
    ],
)
def test_sizes_parse_to_bytes(text: object, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["64 parsecs", "GiB", "-1GB", "1.5", 1.5, True, None, "0.3B"])
def test_sizes_that_are_not_sizes_are_rejected(text: object) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("25Gbps", 25e9 / 8),
        ("100Mbit/s", 100e6 / 8),
        ("10Gb/s", 10e9 / 8),
        ("10GB/s", 10e9),
        ("10GBps", 10e9),
        ("1.25GiB/s", 1.25 * 2**30),
        ("3.35e12", 3.35e12),
        (1e9, 1e9),
    ],
)
def test_rates_parse_to_bytes_per_second(text: object, expected: float) -> None:
    assert parse_rate(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["fast", "10 furlongs/s", "-5GB/s", "10G", True])
def test_rates_that_are_not_rates_are_rejected(text: object) -> None:
    with pytest.raises(ValueError):
        parse_rate(text)


def test_exact_sizes_and_rates_are_written_in_units() -> None:
    assert format_bytes(64 * 2**30) == "64GiB"
    assert format_bytes(2 * 10**12) == "2TB"
    assert format_bytes(25276510208) == 25276510208
    assert format_rate(25e9 / 8) == "25Gbps"
    assert format_rate(10e9) == "80Gbps"
    assert format_rate(1234.5) == 1234.5


@given(st.integers(min_value=0, max_value=2**62))
def test_bytes_round_trip(count: int) -> None:
    assert parse_bytes(format_bytes(count)) == count


@given(st.floats(min_value=0, max_value=1e15, allow_nan=False))
def test_rates_round_trip(rate: float) -> None:
    assert parse_rate(format_rate(rate)) == rate


def test_human_forms_are_short() -> None:
    assert human_bytes(64 * 2**30) == "64 GiB"
    assert human_bytes(512) == "512 B"
    assert human_rate(25e9 / 8) == "25 Gbit/s"
