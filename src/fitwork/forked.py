"""Run one call in a forked child process and bring its result back (or why it failed)."""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import traceback
from collections.abc import Callable
from typing import Any


class ChildFailed(RuntimeError):
    """The call raised in the child (``died`` False) or the child died (``died`` True)."""

    def __init__(self, message: str, died: bool) -> None:
        super().__init__(message)
        self.died = died


def _child(call: Callable[..., Any], args: tuple[Any, ...], send: Any) -> None:
    try:
        send.send(("ok", call(*args)))
    except Exception as exc:
        where = traceback.format_exc().splitlines()[-2].strip()
        send.send(("error", f"{type(exc).__name__}: {exc}; {where}"))


def run_forked(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` in a forked child: its own memory peak, nothing left in this process."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(call, args, send), daemon=True)
    child.start()
    send.close()
    try:
        status, payload = receive.recv()
    except EOFError:
        child.join()
        raise ChildFailed(f"the process died (exit code {child.exitcode})", died=True) from None
    child.join()
    if status != "ok":
        raise ChildFailed(payload, died=False)
    return payload


def forked_ints(timeout: float, call: Callable[..., tuple[int, ...] | None],
                *args: Any) -> tuple[int, ...] | None:
    """``call(*args)``, a tuple of ints, in a child forked with `os.fork` (so a daemonic
    process may use it too): those ints, or ``None`` where it gave none, raised, died or took
    more than ``timeout`` seconds (the child is then killed).  The ints come back as text:
    nothing is unpickled."""
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send the figure, then leave at once (no cleanup of the copy)
        os.close(readable)
        code = 1
        try:
            value = call(*args)
            with os.fdopen(writable, "w", encoding="ascii") as out:
                out.write("" if value is None else " ".join(str(int(v)) for v in value))
            code = 0
        finally:
            os._exit(code)
    os.close(writable)
    ready: list[int] = []
    try:
        ready, _, _ = select.select([readable], [], [], timeout)
        with os.fdopen(readable, "r", encoding="ascii") as received:
            text = received.read() if ready else ""
    finally:
        if not ready:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return None
    try:
        return tuple(int(v) for v in text.split()) or None
    except ValueError:
        return None
