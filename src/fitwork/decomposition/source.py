"""Find a function's source: the callable to split, its `def` node, its file lines, its comments."""

from __future__ import annotations

import ast
import inspect
import io
import linecache
import tokenize
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fitwork.errors import UnitDefinitionError
from fitwork.workload.unit import Unit

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_BUILTIN = (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodWrapperType,
            types.MethodDescriptorType, types.ClassMethodDescriptorType)


class DecomposeError(UnitDefinitionError):
    """``decompose`` was given something it cannot turn into units (a lambda, a builtin)."""


@dataclass(frozen=True)
class Target:
    """The plain function to split and, for a bound method, the instance it is bound to."""

    fn: types.FunctionType
    bound_self: Any = None
    is_method: bool = False


@dataclass(frozen=True)
class Located:
    """A function's `def` node, the file it is in and that file's lines (1-based by index+1)."""

    node: FunctionNode
    filename: str
    lines: list[str]

    def segment(self, first: int, last: int) -> str:
        """Source lines ``first``..``last`` (1-based, inclusive), as written."""
        return "".join(self.lines[first - 1:last])

    def comments(self) -> dict[int, str]:
        """Comment text by line number, within the function."""
        found: dict[int, str] = {}
        start, end = self.node.lineno, self.node.end_lineno or self.node.lineno
        try:
            for token in tokenize.generate_tokens(io.StringIO("".join(self.lines)).readline):
                if token.type == tokenize.COMMENT and start <= token.start[0] <= end:
                    found[token.start[0]] = token.string
        except (tokenize.TokenError, SyntaxError):
            return {}
        return found


def target(obj: Callable[..., Any]) -> Target:
    """The function behind ``obj``; a lambda, builtin, class or other callable is refused."""
    if isinstance(obj, Unit):
        obj = obj.fn
    if inspect.ismethod(obj) and isinstance(obj.__func__, types.FunctionType):
        inner = target(obj.__func__)
        return Target(fn=inner.fn, bound_self=obj.__self__, is_method=True)
    if isinstance(obj, types.FunctionType):
        if obj.__name__ == "<lambda>":
            raise DecomposeError(
                "decompose: a lambda is one expression, there is nothing to split; pass a "
                "function written with def (or use the lambda as a unit as it is)")
        return Target(fn=obj)
    if inspect.isbuiltin(obj) or isinstance(obj, _BUILTIN):
        raise DecomposeError(
            f"decompose: {obj!r} is a builtin, with no Python source to split; wrap it in a "
            "def, or use it as a unit as it is")
    if inspect.isclass(obj):
        raise DecomposeError(
            f"decompose: {obj.__name__} is a class; pass a function, or a method of an "
            f"instance (decompose({obj.__name__}(...).method))")
    raise DecomposeError(
        f"decompose: {obj!r} ({type(obj).__name__}) is not a function written with def; "
        "pass a def function or a bound method (for a callable object, its .__call__)")


def locate(fn: types.FunctionType) -> Located | str:
    """The function's `def` node and file, or why there is none to split."""
    if getattr(fn, "__wrapped__", None) is not None:
        return (f"{fn.__qualname__} wraps another function (functools.wraps); the wrapper's "
                "own code would be lost, so it runs whole")
    code = fn.__code__
    lines = linecache.getlines(code.co_filename, fn.__globals__)
    if not lines:
        return (f"no source for {fn.__qualname__} (defined in {code.co_filename}, where "
                "Python keeps no source text: exec, the REPL)")
    try:
        tree = ast.parse("".join(lines), filename=code.co_filename)
    except SyntaxError:
        return f"the source of {code.co_filename} does not parse (changed since it was imported?)"
    for node in ast.walk(tree):
        if isinstance(node, FunctionNode) and node.name == code.co_name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if first == code.co_firstlineno:
                return Located(node=node, filename=code.co_filename, lines=lines)
    return (f"no def {code.co_name} at {code.co_filename}:{code.co_firstlineno} (the file "
            "changed since it was imported?)")
