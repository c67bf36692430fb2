"""The import graph: no cycles, no module importing a layer above its own, the demo on the
public API alone (docs/architecture.md, "Layers", draws the same picture)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom to top, as data flows. A module takes the layer of its longest listed prefix.
LAYERS = {
    # 0 values: import nothing of fitwork above this line
    "fitwork.errors": 0, "fitwork.version": 0, "fitwork.resources": 0,
    "fitwork.failure": 0, "fitwork.document": 0, "fitwork.forked": 0,
    "fitwork.io.unreadable": 0, "fitwork.hardware.units": 0,
    # 1 units and placements; 2 the run record
    "fitwork.workload": 1, "fitwork.placement": 1,
    "fitwork.telemetry.record": 2, "fitwork.telemetry.figures": 2,
    # 3 hardware, input and output
    "fitwork.hardware": 3, "fitwork.io": 3,
    # 4 measurement; 5 decomposition; 6 fit; 7 engines
    "fitwork.telemetry": 4, "fitwork.profiling": 4,
    "fitwork.decomposition": 5,
    "fitwork.fit": 6,
    "fitwork.engine": 7,
    # 8 running one pipeline or many; 9 reports and orchestrators; 10 LLM serving
    "fitwork.runner": 8, "fitwork.io.journaled": 8, "fitwork.jobs": 8,
    "fitwork.report": 9, "fitwork.orchestrate": 9,
    "fitwork.llm": 10,
    # 11 the command line (wherever its modules sit) and the public API
    "fitwork.cli": 11, "fitwork.commands": 11, "fitwork.jobs.cli": 11, "fitwork": 11,
    # 12 programs on the public API
    "fitwork_demo": 12,
}

KNOWN_UPWARD: set[str] = set()
"""Upward imports the code has today, named so a new one fails and a fixed one is dropped."""

KNOWN_CYCLE_EDGES = {
    # run_demo writes its files (files.write_files, imported inside the function) and
    # files.py imports run's result types at the top: a cycle. Split the types out, then drop.
    ("fitwork_demo.run", "fitwork_demo.files"),
}
"""Edges the cycle check steps over today, on the same terms as KNOWN_UPWARD."""


def layer(module: str) -> int:
    """The layer of a module: that of the longest listed prefix."""
    parts = module.split(".")
    for size in range(len(parts), 0, -1):
        prefix = ".".join(parts[:size])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise AssertionError(f"{module} is in no layer; add it to LAYERS")


def imports() -> dict[str, set[str]]:
    """Every fitwork module and the fitwork modules it imports (outside TYPE_CHECKING)."""
    graph: dict[str, set[str]] = {}
    for path in sorted([*(SRC / "fitwork").rglob("*.py"), *(SRC / "fitwork_demo").rglob("*.py")]):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        found: set[str] = set()

        class Visitor(ast.NodeVisitor):
            def __init__(self, found: set[str]) -> None:
                self.found = found

            def visit_If(self, node: ast.If) -> None:
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    self.generic_visit(node)

            def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
                if node.level == 0 and node.module and node.module.startswith("fitwork"):
                    self.found.add(node.module)

            def visit_Import(self, node: ast.Import) -> None:
                self.found.update(a.name for a in node.names if a.name.startswith("fitwork"))

        Visitor(found).visit(ast.parse(path.read_text()))
        graph[name] = found - {name}
    return graph


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = sorted(f"{source} -> {target}" for source, targets in imports().items()
                    for target in targets if layer(target) > layer(source))
    assert set(upward) == KNOWN_UPWARD


def test_the_demo_uses_the_public_api_alone() -> None:
    graph = imports()
    reach = sorted(f"{source} -> {target}" for source, targets in graph.items()
                   if source.startswith("fitwork_demo") for target in targets
                   if target != "fitwork" and not target.startswith("fitwork_demo"))
    assert reach == []
    assert not [s for s, ts in graph.items() if s.startswith("fitwork.")
                and any(t.startswith("fitwork_demo") for t in ts)]


def test_the_import_graph_has_no_cycles() -> None:
    graph = imports()
    modules = set(graph)

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    edges = {m: {t for t in map(resolve, graph[m]) if t and t != m} for m in graph}
    assert {(a, b) for a, b in KNOWN_CYCLE_EDGES if b in edges.get(a, set())} == KNOWN_CYCLE_EDGES
    edges = {m: {t for t in targets if (m, t) not in KNOWN_CYCLE_EDGES}
             for m, targets in edges.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt.startswith(node + ".") or node == "fitwork":
                continue  # a package importing its own submodules is how packages work
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(edges):
        if module not in state:
            cycle = visit(module)
            assert cycle is None, " -> ".join(cycle)
