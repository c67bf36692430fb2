"""A bench shape's description (pipeline, run size, sweeps), a CPU-spin helper, and a
loopback HTTP service started in a process of its own."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fitwork import Pipeline


@dataclass(frozen=True)
class Shape:
    """One held-out pipeline: what it is, items per full bench run, the monolith's process
    sweep and the hand grid (replicas per unit a person tuning by hand would try)."""

    pipeline: Pipeline
    shape: str
    items: int
    monolith: tuple[int, ...]
    grid: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The pipeline's name."""
        return self.pipeline.name


def spin(seconds: float) -> None:
    """Keep this thread's CPU busy for ``seconds`` of its own CPU time (pure Python), as a
    device driver's synchronise or a JIT compiler holds a core."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def requested_number(reader: asyncio.StreamReader) -> int:
    """The N of a ``GET /<anything>/N`` request, its headers read past."""
    request = await reader.readline()
    while (await reader.readline()) not in (b"\r\n", b""):
        pass  # the headers
    return int(request.split()[1].rsplit(b"/", 1)[1])


def ok_json(writer: asyncio.StreamWriter, body: bytes) -> None:
    """A 200 answer carrying JSON ``body``."""
    writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def _serve(make_handler: Callable[[], Handler], ready: Any) -> None:
    """The service process: ``make_handler()``'s handler on an asyncio server at a loopback
    port, which it sends back through ``ready``."""
    handler = make_handler()

    async def serve() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0, backlog=1024)
        ready.send(server.sockets[0].getsockname()[1])
        ready.close()
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


def start_loopback(make_handler: Callable[[], Handler], name: str
                   ) -> tuple[multiprocessing.process.BaseProcess, int]:
    """Fork a process serving ``make_handler()``'s connection handler on 127.0.0.1 (built
    there, so its state is the service's own); return the process and its port.  Call it
    before anything else forks, so workers inherit the port; terminate the process after."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_serve, args=(make_handler, send), daemon=True, name=name)
    process.start()
    send.close()
    return process, receive.recv()
