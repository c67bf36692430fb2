"""Split a function body at top-level statements: facts, liveness, where a cut is safe, groups.

::

    body ─▶ statements (hints attached) ─▶ facts ─▶ liveness ─▶ cuts ─▶ groups
                                                                 │
        a cut between two statements is refused when a value that cannot be pickled is live
        across it (a function or class defined inside, a generator, an open file, a module
        imported inside a block), or when it falls inside the tail: from the first statement
        that returns early (or yields) to the end, which stays one unit.

Imports at the top level of the body are not passed between units: a unit that uses the
name runs the import again (modules are cached, so that is a lookup).  For a bound method,
``self`` is bound in every unit from the instance, never pickled per item.
"""

from __future__ import annotations

import ast
import inspect
import types
from dataclasses import dataclass, field
from typing import Protocol, TypedDict, Unpack

from fitwork.decomposition.analysis import (
    Facts,
    facts,
    imported_names,
    liveness,
    target_names,
)
from fitwork.decomposition.checks import own_scope
from fitwork.decomposition.hints import COMMENT, HintKind, check_kind, hint
from fitwork.decomposition.report import Merge, MergeRule
from fitwork.decomposition.source import DecomposeError, Located, Target
from fitwork.decomposition.waits import dotted as _dotted
from fitwork.decomposition.waits import resolve as _resolve
from fitwork.decomposition.waits import waiting_call

DEMANDING: tuple[HintKind, ...] = ("gpu", "cpu", "io")
"""Hint kinds, most demanding first: a group of several takes the first."""


@dataclass(frozen=True)
class Statement:
    """One top-level statement of the body."""

    index: int
    node: ast.stmt
    first: int
    last: int
    facts: Facts
    hint: HintKind | None
    bookkeeping: bool
    label: str
    waits: str | None = None
    """The waiting call the statement makes (``time.sleep``, ``.recv()``...), if any."""

    @property
    def is_import(self) -> bool:
        """True for ``import`` and ``from ... import`` statements."""
        return isinstance(self.node, ast.Import | ast.ImportFrom)


@dataclass(frozen=True)
class Group:
    """Statements ``start`` up to (not including) ``stop``: one unit."""

    start: int
    stop: int


@dataclass
class Split:
    """A function body analysed for splitting."""

    statements: list[Statement]
    params: list[str]
    live_in: list[frozenset[str]]
    live_out: list[frozenset[str]]
    bound_before: list[frozenset[str]]
    replayable: frozenset[str]
    pinned: frozenset[str]
    unportable: dict[str, str]
    tail: int
    tail_reason: str
    generator: bool
    notes: list[str] = field(default_factory=list)

    def lines(self, group: Group) -> tuple[int, int]:
        """First and last source line of a group."""
        return self.statements[group.start].first, self.statements[group.stop - 1].last

    def inputs(self, group: Group) -> list[str]:
        """Variables the group's unit receives (unpacked, so they stay its locals)."""
        return sorted(self.live_in[group.start] - self.pinned)

    def carried(self, group: Group) -> list[str]:
        """Variables that cross into the group's unit from the one before it: live there,
        and bound on some path (one that is surely unbound carries nothing)."""
        live = self.live_in[group.start] & self.bound_before[group.start]
        return sorted(live - self.pinned - self.replayable)

    def outputs(self, group: Group) -> list[str]:
        """Variables the group's unit passes on (nothing for the last unit)."""
        if group.stop == len(self.statements):
            return []
        live = self.live_out[group.stop - 1] & self.bound_before[group.stop]
        return sorted(live - self.pinned - self.replayable)

    def replays(self, group: Group) -> list[int]:
        """Indices of earlier import statements whose names this group uses."""
        used: set[str] = set()
        for s in self.statements[group.start:group.stop]:
            used |= s.facts.reads & self.replayable
        chosen = set()
        for name in used:
            earlier = [s.index for s in self.statements[:group.start]
                       if s.is_import and name in s.facts.writes]
            if earlier:
                chosen.add(earlier[-1])
        return sorted(chosen)

    def label(self, group: Group) -> str:
        """A short name for the group: the last variable it assigns, else its first statement."""
        members = self.statements[group.start:group.stop]
        for s in reversed(members):
            if s.label in s.facts.writes:
                return s.label
        return members[0].label

    def unit_name(self, group: Group) -> str:
        """The unit's name: its label and its line range."""
        first, last = self.lines(group)
        span = f"{first}" if first == last else f"{first}-{last}"
        return f"{self.label(group)}@{span}"

    def hint(self, group: Group) -> HintKind | None:
        """The kind the group's statements were hinted with; when a safe cut forced
        differently hinted statements together, the most demanding (gpu, cpu, io)."""
        kinds = {s.hint for s in self.statements[group.start:group.stop] if s.hint}
        return next((k for k in DEMANDING if k in kinds), None)

    def waits(self, group: Group) -> str | None:
        """The first waiting call among the group's statements (see `waits`), if any."""
        return next((s.waits for s in self.statements[group.start:group.stop] if s.waits),
                    None)

    def cut_refused(self, boundary: int) -> str | None:
        """Why the body cannot be cut before statement ``boundary``, or ``None``."""
        if boundary > self.tail:
            return self.tail_reason
        live = sorted(self.live_in[boundary] & self.unportable.keys())
        if live:
            return f"{live[0]} cannot cross processes ({self.unportable[live[0]]})"
        return None


# ---------------------------------------------------------------- reading the body


def _hint_call(stmt: ast.stmt, fn: types.FunctionType) -> HintKind | None:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value
    resolved = _resolve(call.func, fn)
    unresolved_name = resolved is None and _dotted(call.func) in ("fitwork.hint", "hint")
    if resolved is not hint and not unresolved_name:
        return None
    if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Constant) \
            or not isinstance(call.args[0].value, str):
        raise DecomposeError(f"line {stmt.lineno}: hint() takes one string literal, e.g. "
                             "fitwork.hint('gpu')")
    return check_kind(call.args[0].value, f"line {stmt.lineno}: hint()")


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
        and isinstance(stmt.value.value, str)


def _simple(expr: ast.expr | None) -> bool:
    match expr:
        case None | ast.Constant() | ast.Name():
            return True
        case ast.Attribute(value=value) | ast.Starred(value=value) | ast.FormattedValue(
                value=value):
            return _simple(value)
        case ast.Subscript(value=value, slice=index):
            return _simple(value) and _simple(index)
        case ast.Slice(lower=lower, upper=upper, step=step):
            return _simple(lower) and _simple(upper) and _simple(step)
        case ast.Tuple(elts=elts) | ast.List(elts=elts) | ast.Set(elts=elts) | ast.JoinedStr(
                values=elts):
            return all(_simple(e) for e in elts)
        case ast.Dict(keys=keys, values=values):
            return all(_simple(k) for k in keys) and all(_simple(v) for v in values)
        case ast.UnaryOp(operand=ast.Constant()):
            return True
    return False


def bookkeeping(stmt: ast.stmt) -> bool:
    """True for a statement with no calls or arithmetic: it costs next to nothing to run."""
    match stmt:
        case ast.Pass() | ast.Delete() | ast.Import() | ast.ImportFrom() | ast.Global():
            return True
        case ast.Expr(value=ast.Constant()):
            return True
        case ast.Assign(targets=targets, value=value):
            return _simple(value) and all(_simple(t) for t in targets)
        case ast.AnnAssign(target=target, value=value):
            return _simple(value) and _simple(target)
        case ast.Return(value=value):
            return _simple(value)
    return False


def _label(stmt: ast.stmt) -> str:
    match stmt:
        case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name) | ast.ClassDef(
                name=name):
            return name
        case ast.Expr(value=ast.Call(func=func)) if _dotted(func):
            return _dotted(func).rsplit(".", 1)[-1]
    assigned = [name for node in own_scope([stmt]) if (bound := _bindings(node))
                and not isinstance(node, ast.For | ast.AsyncFor)
                for target in bound[0] for name in _ordered_names(target)]
    return assigned[-1] if assigned else type(stmt).__name__.lower()


def _ordered_names(target: ast.expr) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def _holds(value: ast.expr | None) -> str | None:
    match value:
        case ast.Lambda():
            return "a lambda"
        case ast.GeneratorExp():
            return "a generator"
        case ast.Call(func=ast.Name(id="open")):
            return "an open file"
        case ast.Tuple(elts=elts) | ast.List(elts=elts) | ast.Set(elts=elts):
            return next((h for h in map(_holds, elts) if h), None)
        case ast.Dict(values=values):
            return next((h for h in map(_holds, values) if h), None)
    return None


def _aliases(value: ast.expr | None) -> set[str]:
    """Names whose very object ``value`` is or directly contains (not what a call returns)."""
    match value:
        case ast.Name(id=name):
            return {name}
        case ast.Starred(value=inner) | ast.NamedExpr(value=inner):
            return _aliases(inner)
        case ast.Tuple(elts=elts) | ast.List(elts=elts) | ast.Set(elts=elts):
            return set().union(*(_aliases(e) for e in elts))
        case ast.Dict(values=values):
            return set().union(*(_aliases(v) for v in values))
        case ast.IfExp(body=body, orelse=orelse):
            return _aliases(body) | _aliases(orelse)
    return set()


def _instances(value: ast.expr | None, classes: set[str]) -> set[str]:
    """Local classes ``value`` makes an instance of, directly."""
    match value:
        case ast.Call(func=ast.Name(id=name)) if name in classes:
            return {name}
        case ast.Tuple(elts=elts) | ast.List(elts=elts):
            return set().union(*(_instances(e, classes) for e in elts))
    return set()


def _bindings(node: ast.AST) -> tuple[list[ast.expr], ast.expr | None] | None:
    """The targets an assignment-like node binds and the value they get."""
    match node:
        case ast.Assign(targets=targets, value=value):
            return targets, value
        case ast.AnnAssign(target=target, value=value) | ast.AugAssign(
                target=target, value=value) | ast.NamedExpr(target=target, value=value):
            return [target], value
        case ast.For(target=target, iter=value) | ast.AsyncFor(target=target, iter=value):
            return [target], value
    return None


def _roots(node: ast.AST, line: int) -> dict[str, str]:
    """Names a node binds to something no other process can receive."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return {node.name: f"a function defined at line {line}"}
    if isinstance(node, ast.ClassDef):
        return {node.name: f"a class defined at line {line}"}
    if isinstance(node, ast.With | ast.AsyncWith):
        return {name: f"bound by the with statement at line {line}" for item in node.items
                if item.optional_vars is not None for name in target_names(item.optional_vars)}
    bound = _bindings(node)
    if bound is not None and not isinstance(node, ast.For | ast.AsyncFor):
        held = _holds(bound[1])
        if held:
            return {name: f"{held}, line {line}" for t in bound[0] for name in target_names(t)}
    return {}


def _unportable(statements: list[Statement]) -> dict[str, str]:
    """Local names that may hold a value pickle cannot send, each with the reason.

    Roots: functions and classes defined inside, lambdas, generators, open files, ``with``
    targets, modules imported inside a block.  A name becomes one too when it is assigned
    such a value itself (``g = f``, ``fs = [f]``, ``for f in fs``) or an instance of a local
    class; not when it is assigned what a call returns (``y = f(x)``).  A value the static
    rules miss is caught when a sample runs (it fails to pickle between units).
    """
    why: dict[str, str] = {}
    classes: set[str] = set()
    nodes = [(s, node) for s in statements for node in own_scope([s.node])]
    for s, node in nodes:
        line = getattr(node, "lineno", s.first)
        for name, reason in _roots(node, line).items():
            why.setdefault(name, reason)
        if isinstance(node, ast.ClassDef):
            classes.add(node.name)
        if isinstance(node, ast.Import | ast.ImportFrom) and node is not s.node:
            for name in imported_names(node):
                why.setdefault(name, f"a module imported inside a block at line {line}")
    changed = True
    while changed:
        changed = False
        for s, node in nodes:
            bound = _bindings(node)
            if bound is None:
                continue
            sources = sorted((_aliases(bound[1]) & why.keys()) | _instances(bound[1], classes))
            if not sources:
                continue
            for target in bound[0]:
                for name in sorted(target_names(target) - why.keys()):
                    why[name] = f"holds {sources[0]}, line {getattr(node, 'lineno', s.first)}"
                    changed = True
    return why


def _statement_lines(stmt: ast.stmt) -> tuple[int, int]:
    decorators = getattr(stmt, "decorator_list", [])
    first = min([stmt.lineno, *(d.lineno for d in decorators)])
    return first, stmt.end_lineno or stmt.lineno


def _comment_hints(located: Located, spans: list[tuple[int, int]]) -> dict[int, HintKind]:
    hints: dict[int, HintKind] = {}
    for line, text in sorted(located.comments().items()):
        match = COMMENT.search(text)
        if match is None:
            continue
        kind = check_kind(match.group(1).lower(), f"line {line}: '# fitwork:' comment")
        alone = located.lines[line - 1].lstrip().startswith("#")
        for index, (first, last) in enumerate(spans):
            if first <= line <= last or (alone and first > line):
                hints[index] = kind
                break
    return hints


def _hinted_body(fn: types.FunctionType, node: ast.FunctionDef | ast.AsyncFunctionDef,
                 notes: list[str]) -> list[tuple[ast.stmt, HintKind | None]]:
    """The body's statements, docstring and ``hint()`` calls left out, each with its hint."""
    body = list(node.body)
    if body and _is_docstring(body[0]):
        body = body[1:]
    kept: list[tuple[ast.stmt, HintKind | None]] = []
    pending: tuple[HintKind, int] | None = None
    for stmt in body:
        kind = _hint_call(stmt, fn)
        if kind is not None:
            pending = (kind, stmt.lineno)
            continue
        kept.append((stmt, pending[0] if pending else None))
        pending = None
    if pending:
        notes.append(f"hint('{pending[0]}') at line {pending[1]} has no statement after it")
    return kept


def _read_statements(fn: types.FunctionType, located: Located,
                     kept: list[tuple[ast.stmt, HintKind | None]]) -> list[Statement]:
    """Each kept statement with its lines, facts and hint (a call's or a comment's, not both)."""
    spans = [_statement_lines(stmt) for stmt, _ in kept]
    commented = _comment_hints(located, spans)
    code = fn.__code__
    local = frozenset(code.co_varnames) | frozenset(code.co_cellvars)
    statements = []
    for index, ((stmt, called), (first, last)) in enumerate(zip(kept, spans, strict=True)):
        if called and commented.get(index, called) != called:
            raise DecomposeError(f"line {first}: hinted both {called!r} and "
                                 f"{commented[index]!r}; keep one")
        kind = called or commented.get(index)
        statements.append(Statement(
            index=index, node=stmt, first=first, last=last, facts=facts(stmt).narrowed(local),
            hint=kind, bookkeeping=kind is None and bookkeeping(stmt), label=_label(stmt),
            waits=waiting_call(stmt, fn)))
    return statements


def _tail(statements: list[Statement]) -> tuple[int, str]:
    """The first statement that returns or yields (or the count), and why the rest stay one."""
    tail = next((s.index for s in statements if s.facts.returns or s.facts.yields),
                len(statements))
    tail_reason = ""
    if tail < len(statements):
        at = statements[tail]
        if at.facts.yields:
            tail_reason = (f"line {at.first} yields: the generator's statements from there on "
                           "are one flat-map unit")
        else:
            keyword = type(at.node).__name__.lower()
            tail_reason = (f"return inside the {keyword} statement at line {at.first}: the "
                           "statements from there on stay one unit")
    return tail, tail_reason


def analyse(target: Target, located: Located) -> Split:
    """Read the body: statements with hints and facts, liveness, and what may not be cut."""
    fn = target.fn
    node = located.node
    notes: list[str] = []
    statements = _read_statements(fn, located, _hinted_body(fn, node, notes))
    args = node.args
    params = [a.arg for a in [*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs,
                              args.kwarg] if a is not None]
    live_in, live_out = liveness([s.facts for s in statements])
    bound_before = [frozenset(params)]
    for s in statements:
        bound_before.append(bound_before[-1] | s.facts.writes)
    binders: dict[str, list[Statement]] = {}
    for s in statements:
        for name in s.facts.writes:
            binders.setdefault(name, []).append(s)
    replayable = frozenset(name for name, where in binders.items()
                           if all(s.is_import for s in where) and name not in params)
    pinned: frozenset[str] = frozenset()
    if target.is_method and params and params[0] not in binders:
        pinned = frozenset({params[0]})
    generator = bool(fn.__code__.co_flags & inspect.CO_GENERATOR)
    tail, tail_reason = _tail(statements)
    return Split(statements=statements, params=params, live_in=live_in, live_out=live_out,
                 bound_before=bound_before, replayable=replayable, pinned=pinned,
                 unportable=_unportable(statements),
                 tail=tail, tail_reason=tail_reason, generator=generator, notes=notes)


# ---------------------------------------------------------------- grouping


def span(first: int, last: int) -> str:
    """``line 7`` or ``lines 7-9``."""
    return f"line {first}" if first == last else f"lines {first}-{last}"


class Figures(TypedDict, total=False):
    """What a merge may say it saves: bytes moved and seconds (see `Merge`)."""

    bytes: float | None
    transfer_s: float | None
    time_s: float | None


class Joiner(Protocol):
    """`_join` bound to a split (see `joiner`)."""

    def __call__(self, groups: list[Group], at: int, rule: MergeRule, reason: str,
                 **figures: Unpack[Figures]) -> tuple[list[Group], Merge]:
        """Join ``groups[at]`` with ``groups[at + 1]``."""
        ...


def _join(split: Split, groups: list[Group], at: int, rule: MergeRule, reason: str,
          **figures: Unpack[Figures]) -> tuple[list[Group], Merge]:
    """Join ``groups[at]`` with ``groups[at + 1]``; the merge says which lines and why."""
    left, right = groups[at], groups[at + 1]
    joined = Group(left.start, right.stop)
    merge = Merge(lines=split.lines(joined), parts=[split.lines(left), split.lines(right)],
                  rule=rule, reason=reason, **figures)
    return [*groups[:at], joined, *groups[at + 2:]], merge


def log_merge(merges: list[Merge], merge: Merge) -> None:
    """Add a merge; one that extends the previous merge for the same reason is folded in
    (its bytes and transfer time add up)."""
    if merges and merges[-1].reason == merge.reason and merges[-1].lines == merge.parts[0]:
        last = merges[-1]
        update: dict[str, object] = {"lines": merge.lines, "parts": [*last.parts, merge.parts[1]]}
        for figure in ("bytes", "transfer_s"):
            mine, theirs = getattr(last, figure), getattr(merge, figure)
            if mine is not None and theirs is not None:
                update[figure] = mine + theirs
        merges[-1] = last.model_copy(update=update)
    else:
        merges.append(merge)


def safe_groups(split: Split) -> tuple[list[Group], list[Merge]]:
    """The finest split the code allows: one unit per statement, except across refused cuts."""
    groups = [Group(i, i + 1) for i in range(len(split.statements))]
    merges: list[Merge] = []
    at = 0
    while at < len(groups) - 1:
        reason = split.cut_refused(groups[at + 1].start)
        if reason is None:
            at += 1
            continue
        groups, merge = _join(split, groups, at, "safety", reason)
        log_merge(merges, merge)
    return groups, merges


def bookkeeping_groups(split: Split, groups: list[Group]) -> tuple[list[Group], list[Merge]]:
    """Join each unit made only of bookkeeping statements to its neighbour (the next, or the
    one before when it is last): such a unit costs less than the hop to reach it."""
    merges: list[Merge] = []
    at = 0
    while len(groups) > 1 and at < len(groups):
        group = groups[at]
        if not all(s.bookkeeping for s in split.statements[group.start:group.stop]):
            at += 1
            continue
        into = at if at < len(groups) - 1 else at - 1
        first, last = split.lines(group)
        groups, merge = _join(split, groups, into, "bookkeeping",
                              f"{span(first, last)} only moves names around (no call, no "
                              "arithmetic): not worth a hop")
        log_merge(merges, merge)
        at = into
    return groups, merges


def groups_from_lines(split: Split, spans: list[tuple[int, int]]) -> list[Group]:
    """The groups a saved decomposition names by line ranges; refused if they no longer fit."""
    starts = {s.first: s.index for s in split.statements}
    stops = {s.last: s.index + 1 for s in split.statements}
    groups = []
    for first, last in spans:
        if first not in starts or last not in stops or starts[first] >= stops[last]:
            raise DecomposeError(f"layout: lines {first}-{last} are not whole statements of "
                                 "the function any more; run `fitwork decompose` again")
        groups.append(Group(starts[first], stops[last]))
    expected = 0
    for group in groups:
        if group.start != expected:
            raise DecomposeError("layout: the units do not cover the function's statements "
                                 "in order; run `fitwork decompose` again")
        expected = group.stop
        if group.start > 0 and (reason := split.cut_refused(group.start)):
            raise DecomposeError(f"layout: cannot cut before line {split.lines(group)[0]}: "
                                 f"{reason}")
    if expected != len(split.statements):
        raise DecomposeError("layout: the units do not cover the function's statements; run "
                             "`fitwork decompose` again")
    return groups


def joiner(split: Split) -> Joiner:
    """``_join`` bound to ``split``, for the fusion and pickling passes."""
    def join(groups: list[Group], at: int, rule: MergeRule, reason: str,
             **figures: Unpack[Figures]) -> tuple[list[Group], Merge]:
        return _join(split, groups, at, rule, reason, **figures)

    return join
