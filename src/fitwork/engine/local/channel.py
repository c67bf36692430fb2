"""A bounded many-to-many channel that survives `kill -9` of any process using it.

A channel is a connected pair of Unix datagram sockets plus a counting semaphore of
credits.  Every sender shares one end and every receiver the other: the kernel hands each
datagram whole to exactly one receiver, and a send is all or nothing, so a process killed
mid-call cannot tear a message or leave a lock held.  A sender takes a credit before it
sends and the receiver gives it back on receipt, so at most ``capacity`` frames wait in a
channel: a slow stage slows its producers.  The only thing a kill can leak is a credit
(taken, never sent); the driver tops credits back up when it finds the pipeline quiet.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any

STOP = b"X"
_BUFFER = 1 << 20
RECV_SIZE = 1 << 17


class Channel:
    """Frames in, frames out, at most ``capacity`` in between."""

    def __init__(self, ctx: BaseContext, capacity: int) -> None:
        self.capacity = capacity
        self.credits: Any = ctx.Semaphore(capacity)
        self.send_end, self.recv_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for end in (self.send_end, self.recv_end):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BUFFER)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _BUFFER)
        self.drain_read, self.drain_write = os.pipe()

    def put(self, data: bytes, timeout: float | None = None,
            ready: Callable[[bytes], None] | None = None) -> bool:
        """Take a credit (waiting up to ``timeout``), call ``ready`` with the data, and send;
        False if no credit came."""
        if not self.credits.acquire(timeout=timeout):
            return False
        if ready is not None:
            ready(data)
        self.send_end.send(data)
        return True

    def put_stop(self) -> None:
        """Send a stop marker past the credits (the channel is drained by then)."""
        self.send_end.send(STOP)

    def put_drain(self) -> None:
        """Say nothing more comes but retries (`fitwork.engine.core.Drain`), to every
        receiver at once and to any started later: a byte in a pipe nobody reads, so its
        read end stays readable (the run core says it once a stage)."""
        os.write(self.drain_write, b"D")

    def drained(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for a frame or the drain; True once drained."""
        ready, _, _ = select.select([self.recv_end, self.drain_read], [], [], timeout)
        return self.drain_read in ready

    def head(self) -> bytes:
        """The first byte of the next datagram, left in the channel (b"": none now)."""
        try:
            return self.recv_end.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return b""

    def get(self, timeout: float | None) -> bytes | None:
        """The next datagram, giving its credit back; None when ``timeout`` passes first."""
        self.recv_end.settimeout(timeout)
        try:
            data = self.recv_end.recv(RECV_SIZE)
        except (TimeoutError, BlockingIOError):
            return None
        if data != STOP:
            self.credits.release()
        return data

    def in_use(self) -> int:
        """Credits taken and not yet given back: frames waiting, plus any leaked."""
        return self.capacity - self.credits.get_value()

    def restore_credits(self) -> int:
        """Top credits back up to capacity once the channel is known to be empty."""
        missing = self.in_use()
        for _ in range(missing):
            self.credits.release()
        return missing

    def close(self) -> None:
        """Close both ends in this process."""
        self.send_end.close()
        self.recv_end.close()
        for end in (self.drain_read, self.drain_write):
            with contextlib.suppress(OSError):
                os.close(end)
