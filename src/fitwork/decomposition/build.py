"""Generate, compile and close each unit's function from the statements of its group.

A group becomes (line numbers are the original file's, so tracebacks point at the user's code)::

    def __fitwork_outer():                       # only makes the cells below free variables
        <free variables of the original> = None
        def __fitwork_stage(__fitwork_env):       # the first unit takes the item instead
            try: x = __fitwork_env['x']           # every variable it receives; a missing one
            except KeyError: pass                 #   stays unbound, as it was in the original
            import numpy as np                    # imports it uses, run again (a cache lookup)
            <the group's statements, as written>
            __fitwork_out = {}
            try: __fitwork_out['y'] = y           # exactly the variables later units read
            except NameError: pass
            return __fitwork_out                  # the last unit returns (or yields) instead
        return __fitwork_stage

The stage function is then made with the original's ``__globals__`` (the module's own dict,
so globals are looked up live, as the original looks them up) and a closure of the
original's own cells, matched by name: closures see the same cells, not copies.  The first
unit binds the item with the original signature (defaults, keyword-only defaults, ``*args``);
a bound method's instance is a cell of every unit, never pickled per item.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types
from collections.abc import Callable
from typing import Any, Protocol, TypeGuard

from fitwork.decomposition.hints import Demand
from fitwork.decomposition.source import DecomposeError, Located, Target
from fitwork.decomposition.split import Group, Split
from fitwork.workload.unit import Kind, Unit

ENV = "__fitwork_env"
ITEM = "__fitwork_item"
OUT = "__fitwork_out"
BIND = "__fitwork_bind"
STAGE = "__fitwork_stage"
OUTER = "__fitwork_outer"


def binder(target: Target) -> Callable[[Any], dict[str, Any]]:
    """A function from one item to the original's arguments, defaults applied."""
    signature = inspect.signature(target.fn)
    leading = (target.bound_self,) if target.is_method else ()

    def bind(item: Any) -> dict[str, Any]:
        bound = signature.bind(*leading, item)
        bound.apply_defaults()
        return dict(bound.arguments)

    try:
        bind(object())
    except TypeError as exc:
        raise DecomposeError(
            f"decompose: {target.fn.__qualname__}{signature} cannot be called with one item "
            f"({exc}); give its other parameters defaults") from None
    return bind


class _Positioned(Protocol):
    """An AST node with a position (a statement, expression, argument...)."""

    lineno: int
    end_lineno: int | None
    col_offset: int
    end_col_offset: int | None


def _positioned(node: ast.AST) -> TypeGuard[_Positioned]:
    """Whether ``node``'s class has a position (``lineno`` among its ``_attributes``)."""
    return "lineno" in node._attributes


def _template(source: str, line: int) -> list[ast.stmt]:
    nodes = ast.parse(textwrap.dedent(source)).body
    for node in nodes:
        for sub in ast.walk(node):
            if _positioned(sub):
                sub.lineno = sub.end_lineno = line
                sub.col_offset = sub.end_col_offset = 0
    return nodes


def _stage_tree(split: Split, group: Group, cells: list[str]) -> ast.Module:
    line = split.lines(group)[0]
    first, last = group.start == 0, group.stop == len(split.statements)
    prologue = [f"{ENV} = {BIND}({ITEM})"] if first else []
    prologue += [f"try:\n    {n} = {ENV}[{n!r}]\nexcept KeyError:\n    pass"
                 for n in split.inputs(group)]
    epilogue = []
    if not last:
        epilogue = [f"{OUT} = {{}}"]
        epilogue += [f"try:\n    {OUT}[{n!r}] = {n}\nexcept NameError:\n    pass"
                     for n in split.outputs(group)]
        epilogue.append(f"return {OUT}")
    replays = [copy.deepcopy(split.statements[i].node) for i in split.replays(group)]
    body = [copy.deepcopy(s.node) for s in split.statements[group.start:group.stop]]
    stage = _template(f"def {STAGE}({ITEM if first else ENV}):\n    pass", line)[0]
    assert isinstance(stage, ast.FunctionDef)
    stage.body = [*_template("\n".join(prologue), line), *replays, *body,
                  *_template("\n".join(epilogue), line)]
    outer = _template(f"def {OUTER}():\n" + "".join(f"    {c} = None\n" for c in cells)
                      + f"    return {STAGE}", line)[0]
    assert isinstance(outer, ast.FunctionDef)
    outer.body.insert(len(outer.body) - 1, stage)
    return ast.Module(body=[outer], type_ignores=[])


def _code(parent: types.CodeType, name: str) -> types.CodeType:
    return next(c for c in parent.co_consts if isinstance(c, types.CodeType)
                and c.co_name == name)


def stage_function(split: Split, located: Located, target: Target, group: Group,
                   bind: Callable[[Any], dict[str, Any]]) -> types.FunctionType:
    """The compiled function that runs one group of statements."""
    fn = target.fn
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    cells[BIND] = types.CellType(bind)
    for name in split.pinned:
        cells[name] = types.CellType(target.bound_self)
    tree = _stage_tree(split, group, list(cells))
    try:
        module = compile(tree, located.filename, "exec")
    except SyntaxError as exc:
        raise DecomposeError(f"decompose: lines {split.lines(group)} do not compile as a unit "
                             f"({exc.msg}); please report this with the function") from None
    code = _code(_code(module, OUTER), STAGE)
    name = split.unit_name(group)
    code = code.replace(co_name=fn.__name__, co_qualname=f"{fn.__qualname__}[{name}]")
    closure = tuple(cells[free] for free in code.co_freevars)
    stage = types.FunctionType(code, fn.__globals__, fn.__name__, None, closure)
    stage.__qualname__ = code.co_qualname
    return stage


def make_unit(split: Split, located: Located, target: Target, group: Group,
              bind: Callable[[Any], dict[str, Any]], demand: Demand) -> Unit:
    """The unit for one group: a map, or the flat-map that ends a generator."""
    stage = stage_function(split, located, target, group, bind)
    last = group.stop == len(split.statements)
    kind = Kind.FLAT_MAP if last and split.generator else Kind.MAP
    return Unit(fn=stage, name=split.unit_name(group), kind=kind, resources=demand.resources,
                io=demand.io, cpu_given=False)  # an estimate: Ray may share cores out
