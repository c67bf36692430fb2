"""Decomposition reads waiting calls from the source: sleeps, sockets and files are I/O."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

from fitwork.decomposition import decompose, explain


def sleeps_then_sums(n: int) -> int:
    base = n + 1
    time.sleep(0.001)
    total = sum(i * base for i in range(2000))
    return total


def reads_a_file(path: str) -> int:
    data = Path(path).read_bytes()
    size = len(data) * 3
    return size


def talks_to_a_socket(n: int) -> bytes:
    left, right = socket.socketpair()
    right.sendall(b"x" * (n + 1))
    got = left.recv(1024)
    left.close()
    right.close()
    return got


def waits_in_a_helper_it_only_defines(n: int) -> int:
    def later() -> None:
        time.sleep(1)

    doubled = n * 2
    return doubled


def test_a_sleep_a_file_read_and_a_socket_are_io_without_a_sample() -> None:
    made = explain(sleeps_then_sums, fuse=False)
    kinds = {u.name: (u.kind, u.kind_source) for u in made.units}
    assert kinds["sleep@15"] == ("io", "source")
    assert kinds["base@14"] == (None, "default") and kinds["total@16"] == (None, "default")
    assert made.units[1].resources["io"] == 8
    assert any("waits (time.sleep)" in note for note in made.notes)
    read = explain(reads_a_file, fuse=False)
    assert (read.units[0].kind, read.units[0].kind_source) == ("io", "source")
    sock = explain(talks_to_a_socket, fuse=False)
    assert {u.name: u.kind for u in sock.units}["got@29"] == "io"  # .recv()
    # a sleep inside a function the statement only defines does not run there
    helper = explain(waits_in_a_helper_it_only_defines, fuse=False)
    assert all(u.kind is None for u in helper.units)


async def pause(n: int) -> int:
    await asyncio.sleep(0)
    return n


def test_an_await_and_asyncio_sleep_are_waiting_calls() -> None:
    import ast
    import inspect
    import textwrap

    from fitwork.decomposition.waits import waiting_call

    body = ast.parse(textwrap.dedent(inspect.getsource(pause))).body[0].body  # type: ignore[attr-defined]
    assert waiting_call(body[0], pause) == "await"
    assert waiting_call(ast.parse("asyncio.sleep(1)").body[0], pause) == "asyncio.sleep"
    assert waiting_call(body[1], pause) is None


def sleeps_long_then_sums(n: int) -> int:
    base = n + 1
    time.sleep(0.02)
    total = sum(i * base for i in range(2000))
    return total


def test_a_measured_sleep_is_waiting_and_the_pieces_still_compute_the_same() -> None:
    pipeline = decompose(sleeps_long_then_sums, sample=range(6))
    made = pipeline.decomposition
    sleeper = next(u for u in made.units if "time.sleep" in u.source)
    assert sleeper.kind == "io" and sleeper.kind_source == "measured", made.units
    assert list(pipeline.serial(range(5))) == [sleeps_long_then_sums(n) for n in range(5)]
