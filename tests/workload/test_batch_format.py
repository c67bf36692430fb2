"""Columnar batches: a unit's ``batch_format`` hands it numpy, pandas or arrow, on every engine."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fitwork
from fitwork import Pipeline, UnitDefinitionError, unit
from fitwork.workload.kernel import Kernel
from fitwork.workload.unit import batch_format_missing

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")

ROWS = [{"x": i, "name": f"n{i}", "score": i / 4} for i in range(300)]
SCALARS = list(range(300))


def scored(row: dict[str, Any]) -> dict[str, Any]:
    """What every dict unit below makes of a row: its fields plus ``y``."""
    return {**row, "y": row["x"] * 2 + row["score"]}


# -- the units, one per format and shape (module level, so workers import them by name) ------

@unit(batch_size=16, batch_format="numpy")
def numpy_rows(batch):
    if not (isinstance(batch, dict) and all(isinstance(c, np.ndarray) for c in batch.values())):
        raise TypeError(f"got {type(batch)}")
    return {**batch, "y": batch["x"] * 2 + batch["score"]}


@unit(batch_size=16, batch_format="pandas")
def pandas_rows(frame):
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"got {type(frame)}")
    return frame.assign(y=frame["x"] * 2 + frame["score"])


@unit(batch_size=16, batch_format="arrow")
def arrow_rows(table):
    if not isinstance(table, pa.Table):
        raise TypeError(f"got {type(table)}")
    return table.append_column("y", pc.add(pc.multiply(table["x"], 2), table["score"]))


@unit(batch_size=16, batch_format="numpy")
def numpy_values(values):
    if not (isinstance(values, np.ndarray) and values.shape == (len(values),)):
        raise TypeError(f"got {type(values)}")
    return values * values


@unit(batch_size=16, batch_format="pandas")
def pandas_values(frame):
    if list(frame.columns) != ["value"]:
        raise TypeError(f"got {frame.columns}")
    return frame * frame


@unit(batch_size=16, batch_format="arrow")
def arrow_values(table):
    if table.column_names != ["value"]:
        raise TypeError(f"got {table.column_names}")
    return table.set_column(0, "value", pc.multiply(table["value"], table["value"]))


@unit(batch_size=16, batch_format="pandas")
def one_row_short(frame):
    return frame.iloc[:-1]


@unit(batch_size=16, batch_format="arrow")
def short_when_batched(table):
    return table.slice(0, 1) if table.num_rows > 1 else table


@unit(batch_size=16, batch_format="numpy")
def wrong_type(values):
    return pd.DataFrame({"value": values})


ROW_UNITS = {"numpy": numpy_rows, "pandas": pandas_rows, "arrow": arrow_rows}
VALUE_UNITS = {"numpy": numpy_values, "pandas": pandas_values, "arrow": arrow_values}


def run_local(pipeline: Pipeline, items: list[Any], dead: Path) -> tuple[list[Any], Any]:
    with fitwork.run(pipeline, items, engine="local", dead_letter=dead) as result:
        outputs = list(result)
    return outputs, result.record


def letters(dead: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in dead.read_text().splitlines()] if dead.exists() else []


# -- round trips through a real run -----------------------------------------------------------

@pytest.mark.parametrize("batch_format", ["numpy", "pandas", "arrow"])
def test_dict_items_round_trip_on_the_local_engine(batch_format: str, tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    outputs, record = run_local(Pipeline(ROW_UNITS[batch_format]), ROWS, dead)

    assert letters(dead) == [] and record.failures == 0
    assert sorted(outputs, key=lambda row: row["x"]) == [scored(row) for row in ROWS]
    first = outputs[0]
    assert (type(first["x"]), type(first["name"]), type(first["score"])) == (int, str, float)


@pytest.mark.parametrize("batch_format", ["numpy", "pandas", "arrow"])
def test_plain_items_round_trip_on_the_local_engine(batch_format: str, tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    outputs, record = run_local(Pipeline(VALUE_UNITS[batch_format]), SCALARS, dead)

    assert letters(dead) == [] and record.failures == 0
    assert sorted(outputs) == [i * i for i in SCALARS]
    assert {type(output) for output in outputs} == {int}


@pytest.mark.parametrize("batch_format", ["numpy", "pandas", "arrow"])
def test_the_serial_reference_gives_the_same_outputs(batch_format: str) -> None:
    pipeline = Pipeline(ROW_UNITS[batch_format], name=f"serial_{batch_format}")
    assert list(pipeline.serial(ROWS[:20])) == [scored(row) for row in ROWS[:20]]


# -- failures ---------------------------------------------------------------------------------

def test_a_wrong_row_count_dead_letters_each_item_with_the_fix(tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    outputs, record = run_local(Pipeline(one_row_short), SCALARS[:40], dead)

    assert outputs == [] and record.failures == 40
    found = letters(dead)
    assert sorted(letter["input"] for letter in found) == SCALARS[:40]
    assert found[0]["unit"] == "one_row_short"
    assert found[0]["error"] == (
        "ValueError: batched unit 'one_row_short' (batch_format='pandas') returned 0 results "
        "for 1 items; return one per item")


def test_a_batch_that_fails_is_retried_item_by_item(tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    outputs, record = run_local(Pipeline(short_when_batched), SCALARS[:50], dead)

    assert letters(dead) == [] and record.failures == 0
    assert sorted(outputs) == SCALARS[:50]


def test_a_wrong_return_type_names_what_to_return(tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    outputs, record = run_local(Pipeline(wrong_type), SCALARS[:10], dead)

    assert outputs == [] and record.failures == 10
    assert letters(dead)[0]["error"] == (
        "TypeError: batched unit 'wrong_type' (batch_format='numpy') returned a value of type "
        "pandas.DataFrame; return a dict of arrays, an array or a list with one row per item")


def test_items_of_different_shapes_are_called_alone() -> None:
    @unit(batch_size=8, batch_format="pandas")
    def keys(frame):
        return [",".join(frame.columns)] * len(frame)

    results, failed = Kernel(keys).call_batch([{"a": 1}, {"b": 2}, 3])
    assert (results, failed) == (["a", "b", "value"], 0)


# -- shapes -----------------------------------------------------------------------------------

def test_numpy_stacks_array_items_and_gives_rows_back_as_arrays() -> None:
    @unit(batch_size=8, batch_format="numpy")
    def double(stacked):
        assert stacked.shape == (3, 2, 2)
        return stacked * 2

    items = [np.full((2, 2), i) for i in range(3)]
    results, failed = Kernel(double).call_batch(items)
    assert failed == 0
    assert all(np.array_equal(got, item * 2) for got, item in zip(results, items, strict=True))


def test_ragged_values_arrive_as_an_object_column_and_lists_are_taken_as_rows() -> None:
    @unit(batch_size=8, batch_format="numpy")
    def lengths(batch):
        assert batch["tokens"].dtype == object
        return [len(tokens) for tokens in batch["tokens"]]

    results, failed = Kernel(lengths).call_batch([{"tokens": [1, 2]}, {"tokens": [3]}])
    assert (results, failed) == ([2, 1], 0)


def test_columns_of_different_lengths_are_refused() -> None:
    @unit(batch_size=8, batch_format="numpy")
    def uneven(batch):
        return {"a": batch["x"], "b": batch["x"][:1]}

    with pytest.raises(ValueError, match=r"columns of different lengths \('a': 2, 'b': 1\)"):
        Kernel(uneven)._batch_once([{"x": 1}, {"x": 2}])


def test_a_filter_may_return_a_boolean_column() -> None:
    @unit(batch_size=8, batch_format="pandas", kind="filter")
    def even(frame):
        return frame["value"] % 2 == 0

    assert list(Pipeline(even, name="evens").serial(range(6))) == [0, 2, 4]
    results, _ = Kernel(even).call_batch(list(range(4)))
    assert results == [True, False, True, False]


# -- declaring --------------------------------------------------------------------------------

def test_the_format_survives_pickling() -> None:
    for declared in (*ROW_UNITS.values(), *VALUE_UNITS.values()):
        restored = pickle.loads(pickle.dumps(declared))
        assert restored.batch_format == declared.batch_format
        assert restored.fn is declared.fn


def test_the_format_is_checked_when_the_unit_is_defined() -> None:
    def fn(batch):
        return batch

    with pytest.raises(UnitDefinitionError, match=r"batch_format='polars' is not one of numpy, "
                                                  r"pandas, arrow"):
        unit(batch_size=4, batch_format="polars")(fn)
    with pytest.raises(UnitDefinitionError, match=r"add batch_size=N, or drop batch_format"):
        unit(batch_format="numpy")(fn)
    assert unit(batch_size=4)(fn).batch_format is None


def test_a_missing_library_is_named_with_its_extra() -> None:
    assert batch_format_missing("embed", "pandas", installed=False) == (
        "unit 'embed': batch_format='pandas' needs pandas, which is missing; install it: "
        "pip install 'fitwork[pandas]'")
    assert batch_format_missing("embed", "arrow", installed=False) == (
        "unit 'embed': batch_format='arrow' needs pyarrow, which is missing; install it: "
        "pip install 'fitwork[parquet]'")
    assert batch_format_missing("embed", "arrow", installed=True) is None


def test_a_missing_library_fails_the_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # what `import pyarrow` finds: nothing

    def fn(batch):
        return batch

    with pytest.raises(UnitDefinitionError) as caught:
        unit(batch_size=4, batch_format="arrow", name="embed")(fn)
    assert str(caught.value) == batch_format_missing("embed", "arrow", installed=False)


def test_without_a_format_the_batch_is_still_a_list() -> None:
    @unit(batch_size=8)
    def kinds(batch):
        return [type(batch).__name__] * len(batch)

    assert Kernel(kinds).call_batch([1, 2, 3]) == (["list"] * 3, 0)
