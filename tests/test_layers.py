"""The import graph: no cycles, and no module importing a layer above its own."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom to top, as data flows: values; units; records; hardware; measurement;
# decomposition; fit; engines; running and reporting; the demo; the command line.
LAYERS = {
    "fitwork.errors": 0, "fitwork.version": 0, "fitwork.resources": 0,
    "fitwork.failure": 0, "fitwork.document": 0, "fitwork.forked": 0,
    "fitwork.unreadable": 0,
    "fitwork.workload": 1, "fitwork.placement": 1,
    "fitwork.telemetry.record": 2, "fitwork.telemetry.figures": 2,
    "fitwork.hardware": 3, "fitwork.io": 3, "fitwork.shards": 3, "fitwork.fs": 3,
    "fitwork.formats": 3, "fitwork.readers": 3, "fitwork.writers": 3,
    "fitwork.cli_options": 3,
    "fitwork.telemetry": 4, "fitwork.profiling": 4,
    "fitwork.decomposition": 5,
    "fitwork.fit": 6,
    "fitwork.engine": 7,
    "fitwork.runner": 8, "fitwork.report": 8, "fitwork.orchestrate": 8, "fitwork.journal": 8,
    "fitwork.journaled": 8,
    "fitwork_demo": 9, "fitwork.llm": 9,
    "fitwork.cli": 10, "fitwork": 10,
}


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
    for path in sorted((SRC / "fitwork").rglob("*.py")):
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
    assert upward == []


def test_the_import_graph_has_no_cycles() -> None:
    graph = imports()
    modules = set(graph)

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    edges = {m: {t for t in map(resolve, graph[m]) if t and t != m} for m in graph}
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
