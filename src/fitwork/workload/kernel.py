"""Unit semantics, written once: calling a unit on items and turning results into outputs.

Every place that runs a unit goes through `Kernel`: the serial reference, the local
engine's workers, the Ray replicas, the simulated engine and the profiler.  So map, filter
and flat-map, batches, ``async def`` units and async generators, retries and timeouts
mean the same thing wherever a pipeline runs::

    values ──call / call_batch / results / call_async──▶ raw results (or Failed)
    value, raw ──outputs──▶ [outputs]   map: [raw]  filter: [value] or []  flat-map: raw

A raw result is already materialized: a flat-map's generator is drained inside the call,
so an exception half-way through it fails (and retries) the call, not the pipeline.
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

from fitwork.failure import Failure
from fitwork.workload.unit import Kind, Unit


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


class Kernel:
    """One replica's callable, with the unit's semantics around it."""

    def __init__(self, unit: Unit, fn: Callable[..., Any] | None = None) -> None:
        self.unit = unit
        self.name = unit.name
        self.fn = fn if fn is not None else unit.instantiate()
        self.kind = unit.kind
        self.policy = unit.policy
        self.timeout = unit.timeout
        self.is_async = unit.is_async
        self.plain = (self.kind is Kind.MAP and not self.is_async and self.timeout is None
                      and self.policy.attempts == 1 and unit.batch_size is None)

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
            return Failed(error, getattr(error, "__fitwork_attempts__", 1))

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
            raw = self.fn(values)
            if inspect.isawaitable(raw):
                raw = asyncio.run(_awaited(raw))
            results = list(raw)
            if len(results) != len(values):
                raise ValueError(f"batched unit {self.name!r} returned {len(results)} results "
                                 f"for {len(values)} items; return one per item")
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


def _note_attempts(error: BaseException, attempts: int) -> None:
    with contextlib.suppress(AttributeError, TypeError):
        error.__fitwork_attempts__ = attempts  # type: ignore[attr-defined]


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
