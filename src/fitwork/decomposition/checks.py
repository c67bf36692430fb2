"""Constructs that make a split unsafe; each gives the one-line reason the user sees."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from fitwork.decomposition.analysis import NESTED, imported_names

FRAME_CALLS = {"locals", "exec", "eval"}
FRAME_CALLS_WITHOUT_ARGS = {"vars", "dir"}
FRAME_ATTRIBUTES = {"_getframe", "currentframe"}


def own_scope(nodes: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of these statements that belongs to the function itself, not a nested scope."""
    stack: list[ast.AST] = list(reversed(nodes))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, NESTED):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _stored(nodes: list[ast.stmt], names: set[str]) -> set[str]:
    found = set()
    for node in own_scope(nodes):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and node.id in names:
            found.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.update({node.name} & names)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found.update(set(imported_names(node)) & names)
    return found


def _scope_writes_global(body: list[ast.stmt]) -> tuple[str, int] | None:
    for node in own_scope(body):
        if isinstance(node, ast.Global):
            written = _stored(body, set(node.names))
            if written:
                return sorted(written)[0], node.lineno
    return None


def _private(node: ast.AST) -> tuple[str, int] | None:
    """The first name a class body would mangle (``__x``, not ``__x__``) and its line."""
    for sub in ast.walk(node):
        match sub:
            case ast.Name(id=name) | ast.Attribute(attr=name) | ast.arg(arg=name) | ast.keyword(
                    arg=str(name)):
                pass
            case ast.alias(name=original, asname=alias):
                name = alias or original
            case _:
                continue
        if name.startswith("__") and not name.endswith("__"):
            return name, getattr(sub, "lineno", node.lineno)
    return None


def in_class(qualname: str) -> bool:
    """True when a function was defined in a class body (its private names are mangled)."""
    parts = qualname.split(".")
    return len(parts) > 1 and parts[-2] != "<locals>"


def unsupported(node: ast.FunctionDef | ast.AsyncFunctionDef, freevars: tuple[str, ...],
                qualname: str = "") -> str | None:
    """Why this function cannot be split safely, or ``None`` when it can."""
    if isinstance(node, ast.AsyncFunctionDef):
        return "async def: awaited calls are not split (yet), so it runs whole"
    private = _private(node) if in_class(qualname) else None
    if private:
        return (f"{private[0]} (line {private[1]}) is a private name its class mangles; the "
                "units are compiled outside the class, so it runs whole")
    for sub in own_scope(node.body):
        if isinstance(sub, ast.Nonlocal):
            return (f"nonlocal {', '.join(sub.names)} (line {sub.lineno}) writes a variable of "
                    "an enclosing function, which units in other processes would not see")
    written = _scope_writes_global(node.body)
    if written:
        name, line = written
        return (f"global {name} is assigned (line {line}); units in other processes would not "
                "see the new value")
    for sub in ast.walk(node):
        if isinstance(sub, NESTED[:2]) and sub is not node:
            nested = _scope_writes_global(sub.body)
            if nested:
                return (f"a nested function assigns global {nested[0]} (line {nested[1]}); "
                        "units in other processes would not see the new value")
            for inner in own_scope(sub.body):
                if isinstance(inner, ast.Nonlocal) and set(inner.names) & set(freevars):
                    return (f"a nested function writes nonlocal {', '.join(inner.names)} "
                            f"(line {inner.lineno}) of a function enclosing this one")
        if isinstance(sub, ast.Call):
            reason = _frame_call(sub)
            if reason:
                return reason
    return None


def _frame_call(call: ast.Call) -> str | None:
    func = call.func
    plain = not call.args and not call.keywords
    if isinstance(func, ast.Name):
        if func.id in FRAME_CALLS or (func.id in FRAME_CALLS_WITHOUT_ARGS and plain):
            return (f"{func.id}() (line {call.lineno}) works on the function's frame, which a "
                    "split changes")
        if func.id == "super" and plain:
            return (f"super() without arguments (line {call.lineno}) needs the method's own "
                    "frame; write super(Class, self)")
    if isinstance(func, ast.Attribute) and func.attr in FRAME_ATTRIBUTES:
        return (f"{func.attr}() (line {call.lineno}) inspects the running frame, which a split "
                "changes")
    return None
