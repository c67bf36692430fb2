"""Unit semantics, written once: calling a unit on items and turning results into outputs.

Every place that runs a unit goes through `Kernel`: the serial reference, the local
engine's workers, the Ray replicas, the simulated engine and the profiler.  So map, filter
and flat-map, batches, ``async def`` units and async generators, retries and timeouts
mean the same thing wherever a pipeline runs::

    values ──call / call_batch / results / call_async──▶ raw results (or Failed)
    value, raw ──outputs──▶ [outputs]   map: [raw]  filter: [value] or []  flat-map: raw

A raw result is already materialized: a flat-map's generator is drained inside the call,
so an exception half-way through it fails (and retries) the call, not the pipeline.

A unit with a ``batch_format`` gets its batch as columns (`to_columns`) and its result is
cut back into one raw result per item (`to_rows`); a batch that does not convert, or a
result of the wrong kind or length, fails the call like any error in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

from fitwork.failure import Failure
from fitwork.workload.allotment import Allotment, allot
from fitwork.workload.unit import Kind, Unit

ATTEMPTS_ATTR = "__fitwork_attempts__"
"""The attribute an exception a unit raised carries: the tries it took (see `Failed`)."""


class Failed:
    """Stands in a results list for an item whose call failed every try."""

    __slots__ = ("attempts", "error")

    def __init__(self, error: BaseException, attempts: int) -> None:
        self.error, self.attempts = error, attempts

    def record(self, unit: str, value: Any, path: tuple[int, ...] = (), frame: int = -1,
               offset: int = -1) -> Failure:
        """The dead-letter record of this failure."""
        return Failure.of(unit, self.error, value, attempt=self.attempts, path=path,
                          frame=frame, offset=offset)


class ChildFailed:
    """Stands among a flat-map's outputs for one child that a unit run inside it failed on
    (a shard reader that also runs the pipeline's first unit): that child alone is a
    failure of that unit, as it would be had the unit run in its own replicas."""

    __slots__ = ("failed", "unit", "value")

    def __init__(self, unit: str, value: Any, failed: Failed) -> None:
        self.unit, self.value, self.failed = unit, value, failed


class Kernel:
    """One replica's callable, with the unit's semantics around it.

    ``given`` is what the replica is allotted (`fitwork.placement.allot`; the unit's
    defaults where none is given): a replica given a batch size calls the unit on batches.
    """

    def __init__(self, unit: Unit, fn: Callable[..., Any] | None = None,
                 given: Allotment | None = None) -> None:
        self.unit = unit
        self.given = given if given is not None else allot(unit, None)
        self.batched = bool(self.given.batch_size)
        self.name = unit.name
        self.fn = fn if fn is not None else unit.instantiate()
        self.kind = unit.kind
        self.policy = unit.policy
        self.timeout = unit.timeout
        self.is_async = unit.is_async
        self.batch_format = unit.batch_format
        self.plain = (self.kind is Kind.MAP and not self.is_async and self.timeout is None
                      and self.policy.attempts == 1 and not self.batched)

    # -- one try ---------------------------------------------------------------------------

    def _once(self, value: Any) -> Any:
        result = self.fn(value)
        if inspect.isawaitable(result) or inspect.isasyncgen(result):
            return asyncio.run(_settle_async(result, self.kind))
        return list(result) if self.kind is Kind.FLAT_MAP else result

    def _once_timed(self, value: Any) -> Any:
        if self.timeout is None:
            return self._once(value)
        return _with_deadline(lambda: self._once(value), self.timeout, self.name)

    # -- calls with the retry policy -------------------------------------------------------

    def call(self, value: Any) -> Any:
        """The raw result for one item, retrying per the unit's policy; raises the last error."""
        if self.is_async:
            return asyncio.run(self.call_async(value))
        attempt = 1
        while True:
            try:
                return self._once_timed(value)
            except Exception as error:
                if not self.policy.should_retry(error, attempt):
                    _note_attempts(error, attempt)
                    raise
                time.sleep(self.policy.delay(attempt))
                attempt += 1

    async def call_async(self, value: Any) -> Any:
        """`call` for an event loop: awaits coroutines and drains async generators."""
        attempt = 1
        while True:
            try:
                coroutine = _settle_async(self.fn(value), self.kind)
                if self.timeout is None:
                    return await coroutine
                return await asyncio.wait_for(coroutine, self.timeout)
            except Exception as error:
                if isinstance(error, asyncio.TimeoutError) and not isinstance(error,
                                                                               TimeoutError):
                    error = TimeoutError(f"unit {self.name!r} took longer than "
                                         f"{self.timeout:g} s")
                if not self.policy.should_retry(error, attempt):
                    _note_attempts(error, attempt)
                    raise error from None
                await asyncio.sleep(self.policy.delay(attempt))
                attempt += 1

    def result(self, value: Any) -> Any:
        """`call`, with a failure returned as `Failed` rather than raised."""
        try:
            return self.call(value)
        except Exception as error:
            return Failed(error, getattr(error, ATTEMPTS_ATTR, 1))

    def results(self, values: list[Any]) -> tuple[list[Any], int]:
        """Raw results for items called one at a time, and how many of them are `Failed`."""
        if not self.plain:
            results = [self.result(v) for v in values]
            return results, sum(1 for r in results if type(r) is Failed)
        results, failed, rest = [], 0, iter(values)
        while True:
            try:
                results.extend(map(self.fn, rest))  # keeps what came before a failure
                return results, failed
            except Exception as error:
                results.append(Failed(error, 1))
                failed += 1

    def caller(self) -> Callable[[list[Any]], tuple[list[Any], int]]:
        """Raw results of a list of inputs and how many failed, as the unit takes them: one
        call for a batched unit (`call_batch`), one call each otherwise (`results`)."""
        return self.call_batch if self.batched else self.results

    def call_batch(self, values: list[Any]) -> tuple[list[Any], int]:
        """Raw results for a batch in one call; if the batch fails, each item alone."""
        try:
            results = self._batch_once(values)
        except Exception as error:
            if len(values) > 1:
                parts = [self.call_batch([v]) for v in values]
                return [r for part, _ in parts for r in part], sum(n for _, n in parts)
            return self._batch_retry(values, error)
        return results, 0

    def _batch_once(self, values: list[Any]) -> list[Any]:
        def once() -> list[Any]:
            if self.batch_format is None:
                raw = self.fn(values)
            else:
                raw = self.fn(to_columns(values, self.batch_format, self.name))
            if inspect.isawaitable(raw):
                raw = asyncio.run(_awaited(raw))
            if self.batch_format is None:
                results = list(raw)
            else:
                results = to_rows(raw, values, self.batch_format, self.name)
            if len(results) != len(values):
                raise ValueError(f"batched unit {self.name!r}{_shown(self.batch_format)} "
                                 f"returned {len(results)} results for {len(values)} items; "
                                 "return one per item")
            if self.kind is Kind.FLAT_MAP:
                results = [list(r) for r in results]
            return results

        return once() if self.timeout is None else _with_deadline(once, self.timeout, self.name)

    def _batch_retry(self, values: list[Any], error: Exception) -> tuple[list[Any], int]:
        attempt = 1
        while self.policy.should_retry(error, attempt):
            time.sleep(self.policy.delay(attempt))
            attempt += 1
            try:
                return self._batch_once(values), 0
            except Exception as again:
                error = again
        return [Failed(error, attempt)], 1

    # -- results into outputs --------------------------------------------------------------

    def outputs(self, value: Any, raw: Any) -> list[Any]:
        """The outputs one item gives, from its raw result, by the unit's kind."""
        if self.kind is Kind.MAP:
            return [raw]
        if self.kind is Kind.FILTER:
            return [value] if raw else []
        return raw if isinstance(raw, list) else list(raw)


# -- columnar batches ---------------------------------------------------------------------

_RETURNS = {
    "numpy": "a dict of arrays, an array or a list",
    "pandas": "a pandas.DataFrame, a pandas.Series or a list",
    "arrow": "a pyarrow.Table, a pyarrow.RecordBatch, a pyarrow array or a list",
}


def _shown(batch_format: str | None) -> str:
    return "" if batch_format is None else f" (batch_format={batch_format!r})"


def _keys(values: list[Any], batch_format: str, name: str) -> list[Any] | None:
    """The shared keys of a batch of dicts (in the first item's order), ``None`` for a batch
    of plain values; a batch that mixes the two, or dicts with other keys, is refused."""
    if not values or not isinstance(values[0], dict):
        if any(isinstance(v, dict) for v in values):
            raise TypeError(f"batched unit {name!r}{_shown(batch_format)}: the batch mixes "
                            "dicts and other values; give every item the same shape, or drop "
                            "batch_format")
        return None
    keys = list(values[0])
    wanted = set(keys)
    for number, value in enumerate(values, 1):
        if not isinstance(value, dict) or set(value) != wanted:
            shape = sorted(map(str, value)) if isinstance(value, dict) else type(value).__name__
            raise TypeError(f"batched unit {name!r}{_shown(batch_format)}: item {number} of "
                            f"the batch is {shape}, the first is {sorted(map(str, keys))}; "
                            "give every item the same keys, or drop batch_format")
    return keys


def _array(column: list[Any]) -> np.ndarray:
    """One column as an array: stacked where the values share a shape, else of objects."""
    try:
        return np.asarray(column)
    except ValueError:  # ragged: items of different shapes stay whole
        array = np.empty(len(column), dtype=object)
        array[:] = column
        return array


def to_columns(values: list[Any], batch_format: str, name: str) -> Any:
    """A batch of items as the columnar object ``batch_format`` names (see `Unit`)."""
    keys = _keys(values, batch_format, name)
    if batch_format == "numpy":
        if keys is None:
            return _array(values)
        return {key: _array([v[key] for v in values]) for key in keys}
    if batch_format == "pandas":
        import pandas

        if keys is None:
            return pandas.DataFrame({"value": values})
        return pandas.DataFrame({key: [v[key] for v in values] for key in keys})
    import pyarrow

    if keys is None:
        return pyarrow.table({"value": pyarrow.array(values)})
    return pyarrow.table({str(key): pyarrow.array([v[key] for v in values]) for key in keys})


def to_rows(raw: Any, values: list[Any], batch_format: str, name: str) -> list[Any]:
    """A batched unit's columnar result as one raw result per row.

    A list (or tuple) is taken as it is; a table or a dict of columns gives a dict per row,
    a single array or column a plain value per element; a table whose one column is
    ``value``, made from a batch of plain values, gives plain values back.
    """
    if isinstance(raw, list | tuple):
        return list(raw)
    plain = bool(values) and not isinstance(values[0], dict)
    rows: list[Any] | None = None
    if batch_format == "numpy":
        rows = _numpy_rows(raw, batch_format, name)
    elif batch_format == "pandas":
        rows = _pandas_rows(raw, plain)
    else:
        rows = _arrow_rows(raw, plain)
    if rows is None:
        raise TypeError(f"batched unit {name!r}{_shown(batch_format)} returned "
                        f"{_type_name(raw)}; return {_RETURNS[batch_format]} with one row "
                        "per item")
    return rows


def _elements(column: Any, what: str, batch_format: str, name: str) -> list[Any]:
    """The rows of one array: Python values for a 1-D array, sub-arrays for more dims."""
    if isinstance(column, np.ndarray):
        if column.ndim == 0:
            raise TypeError(f"batched unit {name!r}{_shown(batch_format)} returned a 0-d "
                            f"array{what}; return one row per item")
        return column.tolist() if column.ndim == 1 else list(column)
    if isinstance(column, list | tuple):
        return list(column)
    raise TypeError(f"batched unit {name!r}{_shown(batch_format)} returned "
                    f"{_type_name(column)}{what}; return an array or a list per column")


def _numpy_rows(raw: Any, batch_format: str, name: str) -> list[Any] | None:
    if isinstance(raw, np.ndarray):
        return _elements(raw, "", batch_format, name)
    if not isinstance(raw, dict):
        return None
    columns = {key: _elements(column, f" for column {key!r}", batch_format, name)
               for key, column in raw.items()}
    lengths = {len(column) for column in columns.values()}
    if len(lengths) > 1:
        sizes = ", ".join(f"{key!r}: {len(column)}" for key, column in columns.items())
        raise ValueError(f"batched unit {name!r}{_shown(batch_format)} returned columns of "
                         f"different lengths ({sizes}); return one row per item in each")
    count = lengths.pop() if lengths else 0
    return [{key: column[i] for key, column in columns.items()} for i in range(count)]


def _pandas_rows(raw: Any, plain: bool) -> list[Any] | None:
    import pandas

    rows: list[Any]
    if isinstance(raw, pandas.Series):
        rows = raw.tolist()
    elif not isinstance(raw, pandas.DataFrame):
        return None
    elif plain and list(raw.columns) == ["value"]:
        rows = raw["value"].tolist()
    else:
        rows = raw.to_dict("records")
    return rows


def _arrow_rows(raw: Any, plain: bool) -> list[Any] | None:
    import pyarrow

    rows: list[Any]
    if isinstance(raw, pyarrow.Array | pyarrow.ChunkedArray):
        rows = raw.to_pylist()
    elif not isinstance(raw, pyarrow.Table | pyarrow.RecordBatch):
        return None
    elif plain and raw.column_names == ["value"]:
        rows = raw.column(0).to_pylist()
    else:
        rows = raw.to_pylist()
    return rows


def _type_name(value: object) -> str:
    kind = type(value)
    module = "" if kind.__module__ == "builtins" else f"{kind.__module__.split('.')[0]}."
    return f"a value of type {module}{kind.__qualname__}"


def _note_attempts(error: BaseException, attempts: int) -> None:
    with contextlib.suppress(AttributeError, TypeError):
        setattr(error, ATTEMPTS_ATTR, attempts)  # any exception class: read with getattr


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


async def _settle_async(result: Any, kind: Kind) -> Any:
    if inspect.isasyncgen(result):
        return [child async for child in result]
    if inspect.isawaitable(result):
        result = await result
    return list(result) if kind is Kind.FLAT_MAP else result


def _with_deadline(call: Callable[[], Any], timeout: float, name: str) -> Any:
    """``call()`` in a helper thread; past ``timeout`` it is abandoned with ``TimeoutError``."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as error:
            future.set_exception(error)

    threading.Thread(target=run, daemon=True, name=f"fitwork-{name}-call").start()
    try:
        return future.result(timeout)
    except TimeoutError:
        if future.done():
            return future.result()
        raise TimeoutError(f"unit {name!r} took longer than {timeout:g} s; raise its "
                           "timeout= or look at what it waits on") from None
