"""Monolithic functions for the decomposition equivalence tests, each with the items to run.

Every function here has several top-level statements and at least one place it can be cut.
Module-level names (constants, helpers, a closure factory) are part of what is tested:
the units must resolve them as the original does.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

OFFSET = 100
WORDS = re.compile(r"[a-z]+")
TABLE = {"a": 1, "b": 2, "c": 3}


@dataclass(frozen=True)
class Case:
    """A function, the items to call it on, and whether it is a generator."""

    fn: Callable[..., Any]
    items: list[Any]

    @property
    def name(self) -> str:
        return self.fn.__name__


CASES: list[Case] = []


def case(*items: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        CASES.append(Case(fn, list(items)))
        return fn
    return register


def square(v: float) -> float:
    return v * v


class Parse(Exception):
    """Raised and caught inside `raises_and_catches`."""


def make_scaler(factor: int, shift: int) -> Callable[[int], int]:
    table = [factor, shift]

    def scaled(x: int) -> int:
        a = x * factor
        b = a + table[1]
        c = square(b) - shift
        return c

    return scaled


CASES.append(Case(make_scaler(3, 4), [0, 1, 5, -2]))


@case(0, 3, 10)
def straight(x: int) -> tuple[int, int]:
    a = x + 1
    b = a * 2
    c = b - x
    d = c * c
    return d, a


@case(1, 2.5, -4)
def reads_globals(x: float) -> float:
    a = x + OFFSET
    b = square(a)
    c = math.sqrt(b)
    return c + len(TABLE)


@case(1, 7)
def defaults(x: int, k: int = 3, *, scale: float = 2.0, tag: str = "t") -> tuple[Any, ...]:
    a = x * k
    b = a * scale
    label = f"{tag}{a}"
    return b, label


@case("a-b", "x")
def keyword_only(text: str, *, sep: str = "-", upper: bool = True) -> list[str]:
    parts = text.split(sep)
    if upper:
        parts = [p.upper() for p in parts]
    joined = "+".join(parts)
    return [joined, *parts]


@case(2, 5)
def star_args(*args: int) -> int:
    total = sum(args)
    doubled = total * 2
    return doubled + len(args)


@case(4, 9)
def comprehensions(n: int) -> tuple[Any, ...]:
    squares = [i * i for i in range(n)]
    evens = {i for i in squares if i % 2 == 0}
    index = {i: s for i, s in enumerate(squares)}
    total = sum(s for s in squares if s > 2)
    return squares, sorted(evens), index, total


@case(3, 6)
def shadowed_comprehension(n: int) -> tuple[Any, ...]:
    i = n * 10
    values = [i for i in range(n)]
    pairs = [(i, j) for i in range(2) for j in values if j > i]
    after = i + len(pairs)
    return values, pairs, after


@case(5, 12, 0)
def loop_break_continue(n: int) -> tuple[int, int]:
    total = 0
    seen = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        if total > 20:
            break
        total += i
        seen += 1
    ratio = total * 10 + seen
    return total, ratio


@case(1, 27, 97)
def while_loop(n: int) -> tuple[int, int]:
    steps = 0
    value = n
    while value != 1 and steps < 500:
        value = value // 2 if value % 2 == 0 else 3 * value + 1
        steps += 1
    result = (steps, value)
    return result


@case(-5, 0, 5, 50)
def branches(x: int) -> str:
    if x < 0:
        sign = "neg"
    elif x == 0:
        sign = "zero"
    else:
        sign = "pos"
    size = "big" if abs(x) > 10 else "small"
    label = f"{sign}/{size}"
    return label


@case(1, 8)
def maybe_bound(x: int) -> tuple[Any, ...]:
    if x > 5:
        extra = x * 2
    base = x + 1
    result = (base, extra) if x > 5 else (base,)
    return result


@case(0, 2, 4)
def caught_division(x: int) -> tuple[Any, ...]:
    numerator = 10 * x
    try:
        share = numerator / (x - 2)
    except ZeroDivisionError as exc:
        share = None
        reason = type(exc).__name__
    else:
        reason = "ok"
    finally:
        checked = True
    return share, reason, checked


@case("1,2,x,4", "a,b")
def raises_and_catches(text: str) -> tuple[list[int], list[str]]:
    fields = text.split(",")
    good: list[int] = []
    bad: list[str] = []
    for field in fields:
        try:
            if not field.isdigit():
                raise Parse(field)
            good.append(int(field))
        except Parse as err:
            bad.append(str(err))
    summary = (sorted(good), bad)
    return summary


@case("12", "nope")
def with_statement(text: str) -> int:
    value = -1
    with contextlib.suppress(ValueError):
        value = int(text)
    doubled = value * 2
    return doubled


@case((0, 0), (1, 2), [3], {"k": 5}, "other")
def matching(item: Any) -> str:
    kind = type(item).__name__
    match item:
        case (0, 0):
            shape = "origin"
        case (a, b):
            shape = f"point {a},{b}"
        case [only]:
            shape = f"one {only}"
        case {"k": value}:
            shape = f"k={value}"
        case _:
            shape = "unknown"
    described = f"{kind}:{shape}"
    return described


@case(3, 0)
def generator_tail(n: int) -> Iterator[int]:
    start = n * 10
    stop = start + n
    for i in range(start, stop):
        yield i * 2


@case(2, 4)
def generator_many_yields(n: int) -> Iterator[Any]:
    words = ["w"] * n
    counted = len(words)
    yield counted
    yield from words
    for i in range(n):
        if i % 2:
            yield -i


@case(5, -1)
def generator_early_return(n: int) -> Iterator[int]:
    limit = n + 1
    if limit <= 0:
        return
    yield limit
    half = limit // 2
    yield half


@case(1, 2)
def redefined(x: int) -> list[Any]:
    x = x + 1
    x = str(x)
    x = [x] * 2
    y = len(x)
    x = [*x, y]
    return x


@case(3, 4)
def shadows_global_and_builtin(n: int) -> tuple[int, int, int]:
    OFFSET = n * 2
    len = OFFSET + 1
    total = OFFSET + len
    return OFFSET, len, total


@case(2, 3)
def large_arrays(k: int) -> np.ndarray:
    base = np.arange(300_000, dtype=np.float64) * k
    grid = base.reshape(600, 500)
    centred = grid - grid.mean(axis=0)
    column = centred.sum(axis=1)
    return column


@case(1, 5)
def array_and_scalar(k: int) -> tuple[float, np.ndarray]:
    noise = np.random.default_rng(k).normal(size=(256, 256))
    energy = float((noise**2).sum())
    head = noise[:2, :3].copy()
    return energy, head


@case(2, 6)
def nested_function(n: int) -> list[int]:
    step = 3

    def advance(v: int) -> int:
        return v + step

    values = [advance(i) for i in range(n)]
    last = values[-1] * 2
    return [*values, last]


@case(3, 7)
def stored_lambda(n: int) -> list[int]:
    base = n * 2
    key = lambda v: (v % 3, -v)  # noqa: E731 - a lambda held in a variable is the point
    ordered = sorted(range(base), key=key)
    top = ordered[:3]
    return top


@case(1, 4)
def local_class(n: int) -> tuple[int, str]:
    start = n + 1

    class Box:
        def __init__(self, v: int) -> None:
            self.v = v

    box = Box(start)
    doubled = box.v * 2
    name = type(box).__name__
    return doubled, name


@case("the cat and the hat", "a a a b")
def imports_inside(text: str) -> list[tuple[str, int]]:
    import collections
    from operator import itemgetter

    words = WORDS.findall(text)
    counts = collections.Counter(words)
    ranked = sorted(counts.items(), key=itemgetter(1), reverse=True)
    return ranked[:2]


@case({"name": "a", "values": [1, 2]}, {"name": "b", "values": []})
def dict_item(item: dict[str, Any]) -> dict[str, Any]:
    values = item["values"]
    item["count"] = len(values)
    item["total"] = sum(values)
    name = item["name"].upper()
    out = dict(item, name=name)
    return out


@case(3, 8)
def walrus_in_comprehension(n: int) -> tuple[list[int], int]:
    last = -1
    doubled = [(last := i * 2) for i in range(n)]
    final = last + 1
    return doubled, final


@case(2, 5)
def deleted_then_rebound(n: int) -> tuple[int, int]:
    temp = n * 4
    kept = temp + 1
    del temp
    temp = kept * 2
    return kept, temp


@case(1, 3)
def aliasing(n: int) -> tuple[list[int], bool]:
    first = [n]
    second = first
    second.append(n + 1)
    same = first is second
    return first, same


@case(["b", "c", "a"], ["a"])
def star_unpacking(letters: list[str]) -> tuple[str, list[str], int]:
    head, *rest = sorted(letters)
    scores = [TABLE[x] for x in rest]
    total = sum(scores)
    return head, rest, total


@case(4, 9)
def closure_over_mutated_local(n: int) -> int:
    count = 0

    def bump() -> None:
        nonlocal count
        count += 1

    for _ in range(n):
        bump()
    doubled = count * 2
    return doubled


@case(7, 2)
def early_return_in_loop(n: int) -> int:
    limit = n * 2
    for i in range(limit):
        if i * i > n:
            return i
    fallback = -limit
    return fallback


@case(3, 5)
def stored_generator(n: int) -> list[int]:
    start = n * 2
    pending = (i * i for i in range(start))
    first = next(pending)
    rest = list(pending)
    return [first, *rest]


@case("aabbbc", "")
def counter_and_strings(text: str) -> str:
    counts = Counter(text)
    common = counts.most_common(2)
    parts = [f"{letter}{number}" for letter, number in common]
    joined = ";".join(parts) or "empty"
    return joined


class Model:
    """An object whose method is decomposed; ``self`` is bound in every unit."""

    def __init__(self, weight: int) -> None:
        self.weight = weight
        self.weights = np.arange(4.0)

    def predict(self, x: int) -> float:
        scaled = x * self.weight
        vector = self.weights * scaled
        score = float(vector.sum())
        return score


CASES.append(Case(Model(3).predict, [1, 2]))
