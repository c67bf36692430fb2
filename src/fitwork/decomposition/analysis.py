"""What one top-level statement reads, may bind, surely binds, and whether it returns or yields.

Reads are conservative: every name a statement loads, and every name used anywhere inside a
nested function, lambda, class body or comprehension (a closure keeps its free variables),
so a variable is passed on whenever a later statement might need it.  Surely-bound names
(``kills``) are exact for simple statements and intersected over the branches of ``if``,
``try`` and ``match``; a loop binds nothing surely (its body may not run), and a ``with``
only its ``as`` targets (the context manager may swallow an exception half-way through).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class Facts:
    """Names a statement touches (all names, before narrowing to the function's locals)."""

    reads: frozenset[str]
    exposed: frozenset[str]
    writes: frozenset[str]
    kills: frozenset[str]
    held: frozenset[str]
    called: frozenset[str]
    returns: bool
    yields: bool

    def narrowed(self, local: frozenset[str]) -> Facts:
        """The same facts about the function's own local variables only."""
        return Facts(self.reads & local, self.exposed & local, self.writes & local,
                     self.kills & local,
                     self.held & local, self.called & local, self.returns, self.yields)


class _Collector(ast.NodeVisitor):
    def __init__(self) -> None:
        self.reads: set[str] = set()
        self.writes: set[str] = set()
        self.held: set[str] = set()
        self.called: set[str] = set()
        self.returns = self.yields = False
        self._callees: set[int] = set()

    def _read(self, name: str, callee: bool = False) -> None:
        self.reads.add(name)
        (self.called if callee else self.held).add(name)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name):
            self._callees.add(id(node.func))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._read(node.id, id(node) in self._callees)
        elif isinstance(node.ctx, ast.Store):
            self.writes.add(node.id)
        else:
            self._read(node.id)
            self.writes.add(node.id)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self._read(node.target.id)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        self.writes.update(imported_names(node))

    visit_ImportFrom = visit_Import

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.writes.add(node.name)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self.writes.add(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.writes.add(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self.writes.add(node.rest)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        self.returns = True
        self.generic_visit(node)

    def visit_Yield(self, node: ast.Yield | ast.YieldFrom) -> None:
        self.yields = True
        self.generic_visit(node)

    visit_YieldFrom = visit_Yield

    def _inside(self, nodes: Iterable[ast.AST], own: frozenset[str] = frozenset()) -> None:
        """A nested scope: the names it uses from outside count as read and kept (a closure
        keeps them); ``own`` are its own locals.  Nonlocal names count as bound."""
        for node in nodes:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id not in own:
                    self._read(sub.id)
                elif isinstance(sub, ast.Nonlocal):
                    self.writes.update(sub.names)

    def _arguments(self, args: ast.arguments) -> None:
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None:
                self.visit(default)
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None and arg.annotation is not None:
                self.visit(arg.annotation)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.writes.add(node.name)
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._arguments(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self._inside(node.body, scope_locals(node.args, node.body))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._arguments(node.args)
        self._inside([node.body], scope_locals(node.args, []))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.writes.add(node.name)
        for part in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(part)
        self._inside(node.body)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp,
                       elements: list[ast.expr]) -> None:
        """The first iterable is evaluated outside; the rest sees the comprehension's own
        variables, except that a walrus binds in the enclosing function."""
        first, *rest = node.generators
        self.visit(first.iter)
        inner = _Collector()
        for part in [*elements, first.target, *first.ifs]:
            inner.visit(part)
        for generator in rest:
            for part in [generator.target, generator.iter, *generator.ifs]:
                inner.visit(part)
        own = set().union(*(target_names(g.target) for g in node.generators))
        self.reads |= inner.reads - own
        self.held |= inner.held - own
        self.called |= inner.called - own
        for part in [*elements, *node.generators]:
            for sub in ast.walk(part):
                if isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name):
                    self.writes.add(sub.target.id)

    def visit_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, [node.key, node.value])


def scope_locals(args: ast.arguments, body: list[ast.stmt]) -> frozenset[str]:
    """Names local to a nested function: its parameters and what its own body binds (not
    what scopes nested deeper bind, and not what it declares nonlocal or global)."""
    names = {a.arg for a in [*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs,
                             args.kwarg] if a is not None}
    declared: set[str] = set()
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.Nonlocal | ast.Global):
            declared.update(node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            continue
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update(imported_names(node))
        if isinstance(node, (ast.Lambda, *COMPREHENSIONS)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return frozenset(names - declared)


def imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The names an import statement binds."""
    return [alias.asname or alias.name.split(".")[0] for alias in node.names]


def target_names(target: ast.expr) -> set[str]:
    """Plain names an assignment target binds (not attributes or subscripts)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Tuple | ast.List):
        return set().union(*(target_names(e) for e in target.elts))
    if isinstance(target, ast.Starred):
        return target_names(target.value)
    return set()


def certain(stmt: ast.stmt) -> set[str]:
    """Names surely bound (or deleted) once ``stmt`` completes normally."""
    match stmt:
        case ast.Assign(targets=targets):
            return set().union(*(target_names(t) for t in targets))
        case ast.AugAssign(target=target) | ast.AnnAssign(target=target, value=ast.expr()):
            return target_names(target)
        case ast.Import() | ast.ImportFrom():
            return set(imported_names(stmt))
        case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name) | ast.ClassDef(
                name=name):
            return {name}
        case ast.Delete(targets=targets):
            return set().union(*(target_names(t) for t in targets))
        case ast.With(items=items) | ast.AsyncWith(items=items):
            # not the body: a context manager may swallow an exception half-way through it
            return set().union(*(target_names(i.optional_vars) for i in items
                                 if i.optional_vars is not None))
        case ast.If(body=body, orelse=orelse):
            return certain_all(body) & certain_all(orelse) if orelse else set()
        case ast.Try(body=body, handlers=handlers, orelse=orelse, finalbody=final) | ast.TryStar(
                body=body, handlers=handlers, orelse=orelse, finalbody=final):
            done = certain_all(body) | certain_all(orelse)
            for handler in handlers:
                done &= certain_all(handler.body)
            return done | certain_all(final)
        case ast.Match(cases=cases):
            if not any(_irrefutable(c) for c in cases):
                return set()
            return set.intersection(*(certain_all(c.body) for c in cases))
    return set()


def _irrefutable(case: ast.match_case) -> bool:
    return case.guard is None and isinstance(case.pattern, ast.MatchAs) \
        and case.pattern.pattern is None


def certain_all(stmts: list[ast.stmt]) -> set[str]:
    """Names surely bound by a block that completes normally (every statement ran)."""
    return set().union(*(certain(s) for s in stmts))


def reads(*nodes: ast.AST | None) -> set[str]:
    """Every name these nodes read (nested scopes: the names they use from outside)."""
    collector = _Collector()
    for node in nodes:
        if node is not None:
            collector.visit(node)
    return collector.reads


def exposed_all(stmts: list[ast.stmt]) -> set[str]:
    """Names a block may read before it has surely bound them."""
    found: set[str] = set()
    bound: set[str] = set()
    for stmt in stmts:
        found |= exposed(stmt) - bound
        bound |= certain(stmt)
    return found


def exposed(stmt: ast.stmt) -> set[str]:
    """Names ``stmt`` may read before it has surely bound them itself (upward-exposed)."""
    match stmt:
        case ast.For(target=target, iter=iterable, body=body, orelse=orelse) | ast.AsyncFor(
                target=target, iter=iterable, body=body, orelse=orelse):
            loop = exposed_all(body) - target_names(target)
            return reads(iterable) | (reads(target) - target_names(target)) | loop \
                | exposed_all(orelse)
        case ast.While(test=test, body=body, orelse=orelse) | ast.If(
                test=test, body=body, orelse=orelse):
            return reads(test) | exposed_all(body) | exposed_all(orelse)
        case ast.With(items=items, body=body) | ast.AsyncWith(items=items, body=body):
            bound = set().union(*(target_names(i.optional_vars) for i in items
                                  if i.optional_vars is not None))
            return reads(*(i.context_expr for i in items)) | (exposed_all(body) - bound)
        case ast.Try(body=body, handlers=handlers, orelse=orelse, finalbody=final) | ast.TryStar(
                body=body, handlers=handlers, orelse=orelse, finalbody=final):
            found = exposed_all(body) | (exposed_all(orelse) - certain_all(body))
            for handler in handlers:
                found |= reads(handler.type) | (exposed_all(handler.body) - {handler.name})
            return found | exposed_all(final)
        case ast.Match(subject=subject, cases=cases):
            found = reads(subject)
            for case in cases:
                captured = _captures(case.pattern)
                found |= (reads(case.pattern) - captured) | (reads(case.guard) - captured)
                found |= exposed_all(case.body) - captured
            return found
    return reads(stmt)


def _captures(pattern: ast.pattern) -> set[str]:
    names = set()
    for node in ast.walk(pattern):
        if isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


def facts(stmt: ast.stmt) -> Facts:
    """Everything the splitter needs to know about one top-level statement."""
    collector = _Collector()
    collector.visit(stmt)
    return Facts(frozenset(collector.reads), frozenset(exposed(stmt)),
                 frozenset(collector.writes),
                 frozenset(certain(stmt)), frozenset(collector.held),
                 frozenset(collector.called), collector.returns, collector.yields)


def liveness(all_facts: list[Facts]) -> tuple[list[frozenset[str]], list[frozenset[str]]]:
    """Live variables before and after each statement of a straight sequence.

    ``live_in[i] = exposed[i] | (live_out[i] - kills[i])``; nothing is live after the last.
    """
    live_in: list[frozenset[str]] = []
    live_out: list[frozenset[str]] = []
    after: frozenset[str] = frozenset()
    for f in reversed(all_facts):
        live_out.append(after)
        after = f.exposed | (after - f.kills)
        live_in.append(after)
    return live_in[::-1], live_out[::-1]
