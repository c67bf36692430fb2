"""Typed CSV: a field that is a number arrives as an int or a float; the rest stays text."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fitwork.io.inputs import read_items
from fitwork.io.readers import csv_value

NUMBERS = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False))
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20)


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(header)
    writer.writerows(rows)
    path.write_text(text.getvalue(), encoding="utf-8", newline="")


def parses_as_a_number(text: str) -> bool:
    """Whether Python's own parsers would take ``text`` for a number."""
    for parse in (int, float):
        try:
            parse(text)
        except ValueError:
            continue
        return True
    return False


def test_numbers_arrive_as_numbers_and_the_rest_as_text(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    write_csv(path, ["id", "name", "score", "code", "note"], [
        [1, "ann", 2.5, "007", ""],
        [-2, "bob", "-0.5", "1_000", "nan"],
        [3, "cy", "1e+16", "+4", " 5"],
    ])

    rows = list(read_items(path, csv_types=True))

    assert rows == [
        {"id": 1, "name": "ann", "score": 2.5, "code": "007", "note": ""},
        {"id": -2, "name": "bob", "score": -0.5, "code": "1_000", "note": "nan"},
        {"id": 3, "name": "cy", "score": 1e16, "code": "+4", "note": " 5"},
    ]
    assert [type(row["id"]) for row in rows] == [int, int, int]
    assert [type(row["score"]) for row in rows] == [float, float, float]


@pytest.mark.parametrize("text", [
    "", "nan", "NaN", "inf", "-inf", "Infinity", "+1", "+1.5", " 1", "1 ", "1_000", "007",
    "-007", "00.5", "0x10", "1e999", "-1e999", "1,5", "1.2.3", "--1", "٣", "1e", "e5", ".", "-",
])
def test_what_only_python_would_call_a_number_stays_text(text: str) -> None:
    assert csv_value(text) == text and type(csv_value(text)) is str


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("-0", 0), ("42", 42), ("-7", -7), ("0.5", 0.5), ("-0.0", -0.0), (".5", 0.5),
    ("1.", 1.0), ("1e5", 1e5), ("1E-7", 1e-7), ("5e-324", 5e-324), ("1" * 40, int("1" * 40)),
])
def test_numbers_as_python_writes_them_are_numbers(text: str, value: int | float) -> None:
    got = csv_value(text)
    assert got == value and type(got) is type(value)


def test_an_int_past_pythons_digit_limit_stays_text() -> None:
    huge = "9" * (sys.get_int_max_str_digits() + 1)
    assert csv_value(huge) == huge


def test_strings_are_kept_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    write_csv(path, ["n", "x"], [[1, 2.5]])

    assert list(read_items(path)) == [{"n": "1", "x": "2.5"}]
    assert list(read_items(path, csv_types=False)) == [{"n": "1", "x": "2.5"}]
    assert list(read_items(path, csv_types=True)) == [{"n": 1, "x": 2.5}]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(NUMBERS, NUMBERS), min_size=1, max_size=8))
@example(rows=[(0, -0.0), (10**30, 1e16), (-1, 5e-324), (7, 1.7976931348623157e308)])
def test_any_int_or_float_csv_writes_comes_back_equal(rows: list[tuple[Any, Any]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "numbers.csv"
        write_csv(path, ["a", "b"], [list(row) for row in rows])
        got = list(read_items(path, csv_types=True))
    assert len(got) == len(rows)
    for read, (a, b) in zip(got, rows, strict=True):
        assert read == {"a": a, "b": b}
        assert (type(read["a"]), type(read["b"])) == (type(a), type(b))
        assert math.copysign(1, read["b"]) == math.copysign(1, b)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=8))
def test_strings_that_are_not_numbers_come_back_unchanged(rows: list[tuple[str, str]]) -> None:
    rows = [row for row in rows if not any(map(parses_as_a_number, row))]
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "text.csv"
        write_csv(path, ["a", "b"], [list(row) for row in rows])
        got = list(read_items(path, csv_types=True))
    assert got == [{"a": a, "b": b} for a, b in rows]


PIPELINE = textwrap.dedent("""
    from fitwork import Pipeline, unit

    @unit
    def kinds(row):
        return {name: type(value).__name__ for name, value in row.items()}

    pipeline = Pipeline(kinds, name="kinds")
""")


@pytest.mark.parametrize(("flags", "expected"), [
    ((), {"id": "int", "score": "float", "code": "str"}),
    (("--csv-strings",), {"id": "str", "score": "str", "code": "str"}),
])
def test_fitwork_run_types_csv_unless_told(tmp_path: Path, flags: tuple[str, ...],
                                           expected: dict[str, str]) -> None:
    (tmp_path / "kinds.py").write_text(PIPELINE)
    write_csv(tmp_path / "in.csv", ["id", "score", "code"], [[1, 0.5, "007"], [2, 1.5, "x"]])

    done = subprocess.run(
        [sys.executable, "-m", "fitwork.cli", "run", "kinds.py:pipeline", "--input", "in.csv",
         "--output", "out.jsonl", "-q", *flags],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [expected, expected]


TYPED = textwrap.dedent("""
    from fitwork import Pipeline, unit

    @unit
    def next_id(row):
        return row["id"] + 1  # a number, as `fitwork run` reads it

    pipeline = Pipeline(next_id, name="typed")
""")


@pytest.mark.parametrize(("flags", "ok"), [((), True), (("--csv-strings",), False)])
def test_fitwork_profile_reads_csv_as_run_does(tmp_path: Path, flags: tuple[str, ...],
                                               ok: bool) -> None:
    """A unit is profiled on the values it will run on: typed, unless told (then this
    unit, which adds to a number, fails on every sample, as it would in the run)."""
    (tmp_path / "typed.py").write_text(TYPED)
    write_csv(tmp_path / "in.csv", ["id", "code"], [[1, "007"], [2, "x"]])

    done = subprocess.run(
        [sys.executable, "-m", "fitwork.cli", "profile", "typed.py:pipeline", "--input",
         "in.csv", "-o", "p.json", *flags],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)

    assert (done.returncode == 0) is ok, done.stderr
    assert (tmp_path / "p.json").exists() is ok
    if not ok:
        assert "next_id" in done.stderr and "failed on all 2 samples" in done.stderr
