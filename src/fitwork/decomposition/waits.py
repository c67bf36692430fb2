"""Statements that wait, read from the source: sleeps, sockets, files, HTTP, child processes.

A statement whose code calls one of these spends its time off the CPU: its unit is I/O
(``io`` kind, calls in flight) when there is no sample to measure it on, and on a sample a
smaller share of CPU makes it I/O than for a statement that shows no wait (see `kinds`).
"""

from __future__ import annotations

import ast
import types
from typing import Any

WAITING = {
    "time.sleep": "time.sleep", "asyncio.tasks.sleep": "asyncio.sleep",
    "select.select": "select.select", "socket.create_connection": "socket.create_connection",
    "socket.getaddrinfo": "socket.getaddrinfo", "urllib.request.urlopen": "urlopen",
    "subprocess.run": "subprocess.run", "subprocess.call": "subprocess.call",
    "subprocess.check_call": "subprocess.check_call",
    "subprocess.check_output": "subprocess.check_output", "posix.read": "os.read",
    "posix.waitpid": "os.waitpid", "io.open": "open", "builtins.open": "open",
}
"""Callables that wait, by the module and name of what a call's name resolves to (read off
the object, so that nothing is imported here to compare with)."""
NAMES = frozenset({
    "time.sleep", "asyncio.sleep", "sleep", "urlopen", "open", "select.select",
    *(f"{client}.{verb}" for client in ("requests", "httpx", "session", "client")
      for verb in ("get", "post", "put", "patch", "delete", "head", "request", "stream")),
})
"""Dotted names that wait, for a call whose name does not resolve (a local, say)."""
METHODS = frozenset({
    "recv", "recv_into", "recvfrom", "recvmsg", "sendall", "sendfile", "accept", "connect",
    "getresponse", "urlopen", "read", "readline", "readlines", "readinto", "read_bytes",
    "read_text", "communicate", "wait", "sleep",
})
"""Method names that wait on a socket, a file, a response or a child process."""


def resolve(expr: ast.expr, fn: types.FunctionType) -> Any:
    """What a name or attribute chain refers to where ``fn`` runs (its closure, its
    globals), or ``None``."""
    if isinstance(expr, ast.Name):
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
        if expr.id in cells:
            try:
                return cells[expr.id].cell_contents
            except ValueError:
                return None
        if expr.id in fn.__globals__:
            return fn.__globals__[expr.id]
        return None
    if isinstance(expr, ast.Attribute):
        return getattr(resolve(expr.value, fn), expr.attr, None)
    return None


def dotted(expr: ast.expr) -> str:
    """A name or attribute chain as written (``time.sleep``), else ``""``."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return f"{dotted(expr.value)}.{expr.attr}"
    return ""


def waiting_call(stmt: ast.stmt, fn: types.FunctionType) -> str | None:
    """The first waiting call (or ``await``) in ``stmt``, as a short name, else ``None``."""
    for node in _run_now(stmt):
        if isinstance(node, ast.Await):
            return "await"
        if not isinstance(node, ast.Call):
            continue
        resolved = resolve(node.func, fn)
        if resolved is not None:
            where = getattr(resolved, "__module__", None) or ""
            known = WAITING.get(f"{where}.{getattr(resolved, '__qualname__', '')}")
            if known:
                return known
        written = dotted(node.func)
        if resolved is None and written in NAMES:
            return written
        if isinstance(node.func, ast.Attribute) and node.func.attr in METHODS:
            return f".{node.func.attr}()"
    return None


_LATER = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _run_now(stmt: ast.stmt) -> list[ast.AST]:
    """The nodes of ``stmt`` that run when it runs (not the bodies of what it defines)."""
    found: list[ast.AST] = []
    pending: list[ast.AST] = [stmt]
    while pending:
        node = pending.pop()
        found.append(node)
        if isinstance(node, _LATER):  # its body runs when it is called, not here
            continue
        pending.extend(reversed(list(ast.iter_child_nodes(node))))
    return found
