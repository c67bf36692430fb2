"""Run one call in a forked child process and bring its result back (or why it failed)."""

from __future__ import annotations

import multiprocessing
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
