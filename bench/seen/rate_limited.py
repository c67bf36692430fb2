"""Held out: an I/O unit against a loopback HTTP service with a rate limit.

The service (``start_service``, a forked process serving HTTP/1.0 on 127.0.0.1) answers each
``GET /item/N`` after 15 ms with a small JSON record, and holds every client to `RATE`
requests per second with a token bucket of `BURST`: a request past it gets ``429`` and the
client waits and asks again (at most `TRIES` times).  The fetch unit declares the limit
(``rate_limit=``), as a user reading the API's terms would; a parse of about 2 ms follows.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import multiprocessing
import time

import numpy as np
from bench_shape import Handler, Shape, ok_json, requested_number, start_loopback

from fitwork import Pipeline, unit

RATE = 200.0  # requests per second the service allows
BURST = 8  # requests it allows at once above the rate
LATENCY_S = 0.015
TRIES = 40  # a client's tries per item before it gives up
BACKOFF_S = 0.01

PORT = 0  # set by start_service before anything forks, so every worker inherits it
REFUSED = 0  # requests the service answered 429 (the service process's own count)


class Bucket:
    """A token bucket: `RATE` tokens a second, at most `BURST` held."""

    def __init__(self) -> None:
        self.tokens, self.at = float(BURST), time.monotonic()

    def take(self) -> bool:
        """Whether a request may pass now (and spend its token)."""
        now = time.monotonic()
        self.tokens = min(float(BURST), self.tokens + (now - self.at) * RATE)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


async def _answer(bucket: Bucket, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> None:
    """One connection: ``GET /item/N``; 429 past the rate, else the record after the wait."""
    try:
        number = await requested_number(reader)
        if not bucket.take():
            writer.write(b"HTTP/1.0 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n")
        else:
            await asyncio.sleep(LATENCY_S)
            values = np.random.default_rng(number).normal(size=96).round(4).tolist()
            ok_json(writer, json.dumps({"id": number, "values": values}).encode())
        await writer.drain()
    except (ConnectionError, IndexError, ValueError):
        pass
    finally:
        writer.close()


def start_service() -> multiprocessing.process.BaseProcess:
    """Start the rate-limited service in its own process and set `PORT`; the caller
    terminates the process it returns."""
    global PORT

    def handler() -> Handler:
        bucket = Bucket()
        return lambda r, w: _answer(bucket, r, w)

    process, PORT = start_loopback(handler, "rate-service")
    return process


@unit(io=8, rate_limit=RATE * 0.95)
def fetch_item(number: int) -> bytes:
    """GET the item's record; on 429 wait and try again, `TRIES` times at most."""
    for _ in range(TRIES):
        connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
        try:
            connection.request("GET", f"/item/{number}")
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        if response.status == 200:
            return body
        if response.status != 429:
            raise OSError(f"the service answered {response.status}")
        time.sleep(BACKOFF_S)
    raise OSError(f"item {number}: still refused after {TRIES} tries")


@unit
def parse_item(body: bytes) -> np.ndarray:
    """Decode the record and work its values over (about 2 ms of numpy)."""
    values = np.asarray(json.loads(body)["values"], dtype=np.float64)
    for _ in range(400):
        values = np.sin(values) * 0.9 + np.cos(values * 0.7) * 0.1
    return values


@unit
def rank(values: np.ndarray) -> float:
    """The record's top value."""
    return float(values.max())


SHAPE = Shape(Pipeline(fetch_item, parse_item, rank, name="rate_limited"),
              "I/O against a loopback service allowing 200 req/s (declared), ~2 ms parse",
              1600, (4, 8, 16, 32), {"fetch_item": (1, 2), "parse_item": (1, 2, 3),
                                     "rank": (1,)})
