"""The demo is a user's program: it reaches fitwork through the public API alone."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import fitwork

DEMO = Path(__file__).resolve().parents[2] / "src" / "fitwork_demo"


def fitwork_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import of a fitwork module in ``path``, nested ones too."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "fitwork":
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "fitwork"]
    return found


def test_the_demo_imports_only_names_the_public_api_exports() -> None:
    modules = sorted(DEMO.glob("*.py"))
    assert len(modules) > 10  # the demo is where this test looks for it
    used: set[str] = set()
    for path in modules:
        for module, names in fitwork_imports(path):
            assert module == "fitwork", f"{path.name} imports {module}, not the public API"
            used.update(names)
    assert used, "the demo runs on fitwork: it imports it"
    assert used <= set(fitwork.__all__), sorted(used - set(fitwork.__all__))


def test_the_demo_is_not_part_of_the_library() -> None:
    assert not (DEMO.parent / "fitwork" / "demo").exists()
    code = ("import sys, fitwork.cli\n"
            "assert 'fitwork_demo.run' not in sys.modules, 'the command loads the demo lazily'")
    subprocess.run([sys.executable, "-c", code], check=True)
