"""How `decompose` splits a function without a sample: data in and out, fallbacks, hints."""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np
import pytest

import fitwork
import fitwork.decomposition as fd
from fitwork import Kind, Pipeline, UnitDefinitionError
from fitwork.decomposition import DecomposeError, Decomposition, decompose, explain, hint
from fitwork.decomposition.render import render

LIMIT = 10


def dead_data(x: int) -> float:
    big = np.zeros(500_000) + x
    small = float(big.sum())
    more = small * 2
    return more


FIRST = dead_data.__code__.co_firstlineno
NAMES = [f"big@{FIRST + 1}", f"small@{FIRST + 2}", f"more@{FIRST + 3}-{FIRST + 4}"]


def test_each_unit_receives_and_passes_only_what_later_units_read() -> None:
    pipeline = decompose(dead_data)
    units = pipeline.decomposition.units
    assert [(u.inputs, u.outputs) for u in units] == [
        (["x"], ["big"]), (["big"], ["small"]), (["small"], ["<return>"])]
    with fitwork.run(pipeline, [1, 2, 3], ordered=True) as result:
        assert list(result) == [dead_data(x) for x in (1, 2, 3)]
    crossed = {u.name: u.bytes_in for u in result.record.units}
    assert crossed[NAMES[1]] > 3 * 4_000_000
    assert crossed[NAMES[2]] < 3 * 200, "the array must not reach the last unit"


def test_units_are_named_by_what_they_make_and_keep_the_original_lines() -> None:
    units = decompose(dead_data).units
    assert [u.name for u in units] == NAMES
    assert all(u.kind is Kind.MAP for u in units)
    report = explain(dead_data).units[1]
    assert report.lines == (FIRST + 2, FIRST + 2)
    assert report.source.strip() == "small = float(big.sum())"


def fails_in_the_middle(x: int) -> int:
    a = x + 1
    b = a // (x - 2)
    return b


def test_tracebacks_point_at_the_original_line() -> None:
    stage = decompose(fails_in_the_middle, fuse=False).units[1].fn
    with pytest.raises(ZeroDivisionError) as caught:
        stage({"a": 3, "x": 2})
    frame = caught.traceback[-1]
    assert frame.path.name == "test_decompose_split.py"
    assert frame.lineno + 1 == fails_in_the_middle.__code__.co_firstlineno + 2


def test_module_globals_are_looked_up_live() -> None:
    def reads_limit(x: int) -> int:
        a = x + 1
        b = a * LIMIT
        return b

    pipeline = decompose(reads_limit, fuse=False)
    global LIMIT
    saved, LIMIT = LIMIT, 1000
    try:
        assert list(pipeline.serial([1])) == [2000] == [reads_limit(1)]
    finally:
        LIMIT = saved


def test_imports_inside_the_function_are_run_again_not_passed() -> None:
    def uses_json(x: int) -> str:
        import json
        from math import sqrt as root

        value = root(x)
        text = json.dumps({"v": value})
        return text

    units = explain(uses_json, fuse=False).units
    assert all("json" not in u.inputs + u.outputs for u in units)
    assert all("root" not in u.inputs + u.outputs for u in units)
    pipeline = decompose(uses_json, fuse=False)
    with fitwork.run(pipeline, [4, 9], ordered=True) as result:
        assert list(result) == ['{"v": 2.0}', '{"v": 3.0}']


class Scaler:
    def __init__(self) -> None:
        self.factor = 3
        self.lock = threading.Lock()

    def apply(self, x: int) -> int:
        a = x * self.factor
        b = a + 1
        with self.lock:
            c = b * 2
        return c


def test_a_bound_method_keeps_its_instance_in_every_unit_unpickled() -> None:
    scaler = Scaler()
    pipeline = decompose(scaler.apply, fuse=False)
    assert len(pipeline.units) >= 3
    assert all("self" not in u.inputs for u in pipeline.decomposition.units)
    with fitwork.run(pipeline, [1, 2], ordered=True) as result:
        assert list(result) == [scaler.apply(1), scaler.apply(2)]


def keeps_a_function(x: int) -> list[int]:
    start = x + 1
    double = lambda v: v * 2  # noqa: E731
    mid = start + 5
    values = [double(start), double(mid)]
    return values


def test_values_that_cannot_be_pickled_never_cross_a_cut() -> None:
    made = explain(keeps_a_function, fuse=False)
    assert made.units[0].lines == (made.lines[0] + 1, made.lines[0] + 1)
    safety = [m for m in made.merges if m.rule == "safety"]
    assert safety and "double cannot cross processes (a lambda" in safety[0].reason
    assert all("double" not in u.inputs for u in made.units)


def early_exit(x: int) -> str:
    a = x * 2
    if a > 5:
        return "big"
    b = a + 1
    c = b * 3
    return str(c)


def test_an_early_return_keeps_the_rest_in_one_unit() -> None:
    made = explain(early_exit, fuse=False)
    assert len(made.units) == 2
    assert "return inside the if statement" in made.merges[0].reason
    assert list(decompose(early_exit).serial([1, 4])) == ["9", "big"]


def counts_calls(x: int) -> int:
    global LIMIT
    LIMIT += 0
    y = x + 1
    return y


def uses_frame(x: int) -> dict[str, Any]:
    a = x + 1
    return dict(locals())


def runs_code(x: int) -> int:
    a = x + 1  # noqa: F841 - read by eval
    return eval("a * 2")


def make_counter() -> Any:
    count = 0

    def counter(x: int) -> int:
        nonlocal count
        count += x
        total = count * 2
        return total

    return counter


async def awaits(x: int) -> int:
    a = x + 1
    return a


def wrapper(fn: Any) -> Any:
    @functools.wraps(fn)
    def inner(x: int) -> Any:
        return fn(x)
    return inner


@wrapper
def wrapped(x: int) -> int:
    a = x + 1
    return a


class Private:
    def __init__(self) -> None:
        self.__scale = 2

    def run(self, x: int) -> int:
        a = x + 1
        b = a * self.__scale
        return b


@pytest.mark.parametrize("fn, reason", [
    (counts_calls, "global LIMIT is assigned"),
    (uses_frame, "locals() (line"),
    (runs_code, "eval() (line"),
    (make_counter(), "nonlocal count"),
    (awaits, "async def"),
    (wrapped, "wraps another function"),
    (Private().run, "__scale (line"),
], ids=lambda v: getattr(v, "__name__", "reason"))
def test_what_cannot_be_split_runs_whole_with_the_reason(fn: Any, reason: str) -> None:
    pipeline = decompose(fn)
    assert len(pipeline.units) == 1
    assert reason in (pipeline.decomposition.fallback or "")
    assert "runs whole: " + pipeline.decomposition.fallback in render(pipeline.decomposition)


def test_a_function_without_source_runs_whole_on_the_engine() -> None:
    namespace: dict[str, Any] = {}
    exec("def nosource(x):\n    a = x + 1\n    return a * 2\n", namespace)
    pipeline = decompose(namespace["nosource"])
    assert "no source for nosource" in (pipeline.decomposition.fallback or "")
    with fitwork.run(pipeline, [1, 2], ordered=True) as result:
        assert list(result) == [4, 6]


@pytest.mark.parametrize("obj, message", [
    (lambda x: x, "a lambda is one expression"),
    (len, "is a builtin"),
    (str.upper, "is a builtin"),
    (Scaler, "is a class"),
    (functools.partial(dead_data), "not a function written with def"),
])
def test_a_lambda_or_builtin_is_refused_clearly(obj: Any, message: str) -> None:
    with pytest.raises(DecomposeError, match=message) as caught:
        decompose(obj)
    assert isinstance(caught.value, UnitDefinitionError)
    assert "\n" not in str(caught.value)


def test_a_function_that_needs_more_than_one_item_is_refused() -> None:
    def two(x: int, y: int) -> int:
        a = x + y
        return a

    with pytest.raises(DecomposeError, match="give its other parameters defaults"):
        decompose(two)


def hinted(x: int) -> int:
    a = x + 1  # fitwork: io
    hint("gpu")
    b = a * 2
    fd.hint("cpu")
    c = b - 1
    # fitwork: gpu
    d = c * 3
    e = d + 1
    return e


def test_hints_mark_statements_and_set_their_resources() -> None:
    made = explain(hinted, fuse=False)
    kinds = [(u.kind, u.kind_source) for u in made.units]
    assert kinds[:4] == [("io", "hint"), ("gpu", "hint"), ("cpu", "hint"), ("gpu", "hint")]
    assert kinds[4] == (None, "default")
    resources = [u.resources for u in made.units]
    assert resources[0]["io"] == 8 and resources[1]["gpu"] == 1 and "gpu" not in resources[2]
    assert list(decompose(hinted).serial([1])) == [hinted(1)]


def test_bad_hints_say_what_to_write() -> None:
    def wrong(x: int) -> int:
        hint("tpu")
        a = x + 1
        return a

    def both(x: int) -> int:
        hint("gpu")
        a = x + 1  # fitwork: io
        return a

    with pytest.raises(UnitDefinitionError, match="kind 'tpu' is not one of cpu, io, gpu"):
        decompose(wrong)
    with pytest.raises(DecomposeError, match="hinted both 'gpu' and 'io'"):
        decompose(both)


def test_without_a_sample_only_bookkeeping_is_joined() -> None:
    def steps(item: dict[str, int]) -> dict[str, int]:
        key = "n"
        value = item[key]
        squared = value * value
        label = str(squared)
        out = {"n": value, "label": label}
        return out

    made = explain(steps)
    first = made.lines[0]
    assert [u.lines for u in made.units] == [(first + 1, first + 3), (first + 4, first + 6)]
    assert {m.rule for m in made.merges} == {"bookkeeping"}
    assert "no sample" in made.notes[0]
    assert len(decompose(steps, fuse=False).units) == 6
    assert list(decompose(steps).serial([{"n": 3}])) == [{"n": 3, "label": "9"}]


def generator(n: int) -> Any:
    limit = n * 2
    for i in range(limit):
        yield i * 10
    tail = -1
    yield tail


def test_a_generator_ends_in_a_flat_map_unit() -> None:
    pipeline = decompose(generator, fuse=False)
    assert [u.kind for u in pipeline.units] == [Kind.MAP, Kind.FLAT_MAP]
    assert pipeline.decomposition.generator
    assert pipeline.decomposition.units[-1].outputs == ["<yield>"]
    with fitwork.run(pipeline, [1, 2], ordered=True) as result:
        assert list(result) == [0, 10, -1, 0, 10, 20, 30, -1]


def test_a_layout_rebuilds_the_same_units_and_refuses_a_changed_function(tmp_path) -> None:
    made = decompose(dead_data)
    path = tmp_path / "d.json"
    made.decomposition.save(path)
    again = decompose(dead_data, layout=Decomposition.load(path))
    assert [u.name for u in again.units] == [u.name for u in made.units]
    changed = Decomposition.load(path).model_copy(update={"source_hash": "0" * 16})
    with pytest.raises(DecomposeError, match="run `fitwork decompose` again"):
        decompose(dead_data, layout=changed)


def test_the_pipeline_is_a_pipeline_and_can_be_fused_back() -> None:
    pipeline = decompose(dead_data)
    assert isinstance(pipeline, Pipeline)
    fused = pipeline.fused()
    assert list(fused.serial([5])) == [dead_data(5)]
    text = render(pipeline.decomposition)
    assert "receives: big    passes on: small" in text
    assert text.splitlines()[-1] == "result: " + " -> ".join(NAMES)
