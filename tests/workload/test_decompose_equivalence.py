"""Equivalence: a decomposed function, run on the local engine, gives exactly the original's
outputs item by item (a corpus of functions, and generated straight-line programs)."""

from __future__ import annotations

import inspect
import itertools
import linecache
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fitwork
from fitwork.decomposition import decompose
from tests.workload.decompose_corpus import CASES, Case


def same(a: Any, b: Any) -> bool:
    """Equal, with numpy arrays compared whole (dtype, shape and values)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and np.array_equal(a, b))
    if isinstance(a, list | tuple) and type(a) is type(b):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def expected(fn: Callable[..., Any], items: list[Any]) -> list[Any]:
    """What calling the function gives, flattened for a generator."""
    target = getattr(fn, "__func__", fn)
    if inspect.isgeneratorfunction(target):
        return [y for x in items for y in fn(x)]
    return [fn(x) for x in items]


def fresh(items: list[Any]) -> list[Any]:
    """Copies of mutable items, so that a function that mutates its item is fair to both."""
    import copy

    return copy.deepcopy(items)


def test_the_corpus_is_large_and_every_function_splits() -> None:
    assert len(CASES) >= 30
    for case in CASES:
        pipeline = decompose(case.fn, fuse=False)
        assert pipeline.decomposition.fallback is None, case.name
        assert len(pipeline.units) >= 2, case.name


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_decomposed_runs_equal_the_function_on_the_engine(case: Case) -> None:
    pipeline = decompose(case.fn, fuse=False)
    with fitwork.run(pipeline, fresh(case.items), ordered=True) as result:
        outputs = list(result)
    assert result.record.failures == 0
    want = expected(case.fn, fresh(case.items))
    assert len(outputs) == len(want)
    for got, ref in zip(outputs, want, strict=True):
        assert same(got, ref), f"{case.name}: {got!r} != {ref!r}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bookkeeping_fusion_keeps_the_outputs(case: Case) -> None:
    pipeline = decompose(case.fn)
    outputs = list(pipeline.serial(fresh(case.items)))
    want = expected(case.fn, fresh(case.items))
    assert all(same(g, r) for g, r in zip(outputs, want, strict=True))
    assert len(outputs) == len(want)


# ---------------------------------------------------------------- generated programs

VARS = ["a", "b", "c", "d"]
_counter = itertools.count()


@st.composite
def programs(draw: st.DrawFn) -> str:
    """A function of one int: assignments, augmented assignments, deletions, branches, loops
    and caught divisions over a few int variables, ending in a return of some of them.

    Operands may name a variable that is unbound at that point on some paths (deleted, or
    bound in one branch only), so some calls raise ``UnboundLocalError``, as some divisions
    raise ``ZeroDivisionError``: the decomposed pipeline must raise the same.
    """
    ever: list[str] = []
    lines = ["def generated(x):"]

    def operand() -> str:
        choice = draw(st.sampled_from(["x", "const", "var", "var", "var"]))
        if choice == "var" and ever:
            return draw(st.sampled_from(ever))
        if choice == "const":
            return str(draw(st.integers(-9, 9)))
        return "x"

    def expression() -> str:
        left, right = operand(), operand()
        return draw(st.sampled_from([
            f"({left} + {right}) % 1000", f"({left} * {right}) % 1000", f"{left} - {right}",
            f"max({left}, {right})", f"-{left}", f"abs({left})", f"{left} // {right}",
            f"({left} if {right} > 0 else {right})", f"len(str({left}))",
            f"sum([{left}, {right}])"]))

    def bind(name: str) -> None:
        if name not in ever:
            ever.append(name)

    for _ in range(draw(st.integers(1, 8))):
        statement = draw(st.sampled_from(["assign", "assign", "aug", "del", "if", "for",
                                          "try"]))
        name = draw(st.sampled_from(VARS))
        if statement == "assign" or not ever:
            lines.append(f"    {name} = {expression()}")
            bind(name)
        elif statement == "aug":
            target = draw(st.sampled_from(ever))
            lines.append(f"    {target} += {expression()}")
            lines.append(f"    {target} %= 1000")
        elif statement == "del":
            target = draw(st.sampled_from(ever))
            lines.append("    if x % 2:")
            lines.append(f"        del {target}")
        elif statement == "if":
            lines.append(f"    if {operand()} > {draw(st.integers(-5, 5))}:")
            lines.append(f"        {name} = {expression()}")
            if draw(st.booleans()):
                lines.append("    else:")
                lines.append(f"        {name} = {operand()}")
            bind(name)
        elif statement == "for":
            target = draw(st.sampled_from(ever))
            lines.append(f"    for i in range({draw(st.integers(0, 3))}):")
            lines.append(f"        {target} = ({target} + i + {operand()}) % 1000")
        else:
            lines.append("    try:")
            lines.append(f"        {name} = {operand()} // {operand()}")
            lines.append("    except ZeroDivisionError:")
            lines.append(f"        {name} = {operand()}")
            bind(name)
    returned = draw(st.lists(st.sampled_from(ever), min_size=1, max_size=3)) if ever else ["x"]
    lines.append(f"    return ({', '.join(returned)},)")
    return "\n".join(lines) + "\n"


def outcome(call: Callable[[], Any]) -> Any:
    """A call's value, or the type of what it raised."""
    try:
        return call()
    except Exception as exc:
        return type(exc)


def compile_program(source: str) -> Callable[[int], Any]:
    """The generated function, with its source registered the way a module's would be."""
    filename = f"<decompose-generated-{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "generated"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["generated"]


ITEMS = [0, 1, -3, 7, 250]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_generated_programs_run_the_same_serially(source: str) -> None:
    fn = compile_program(source)
    pipeline = decompose(fn, fuse=False)
    for x in ITEMS:
        want = outcome(lambda x=x: (fn(x),))
        assert outcome(lambda x=x: tuple(pipeline.serial([x]))) == want, (source, x)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_generated_programs_run_the_same_on_the_engine(source: str) -> None:
    fn = compile_program(source)
    pipeline = decompose(fn, fuse=False)
    wanted = [outcome(lambda x=x: fn(x)) for x in ITEMS]
    with fitwork.run(pipeline, ITEMS, ordered=True, max_attempts=1) as result:
        outputs = list(result)
    assert outputs == [w for w in wanted if not isinstance(w, type)], source
    assert result.record.failures == sum(isinstance(w, type) for w in wanted)
