"""Resolve a ``MODULE_OR_FILE:NAME`` reference to a pipeline."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from fitwork.errors import PipelineLoadError
from fitwork.workload.pipeline import Pipeline
from fitwork.workload.unit import Unit


def load_object(reference: str, default_name: str = "pipeline") -> Any:
    """The object named by ``path/to/file.py:name`` or ``package.module:name``."""
    target, _, name = reference.rpartition(":") if ":" in reference else (reference, "", "")
    name = name or default_name
    if not target:
        raise PipelineLoadError(f"{reference!r}: expected MODULE_OR_FILE:NAME, e.g. "
                                "examples/thumbnails.py:pipeline")
    path = Path(target)
    if target.endswith(".py") or path.is_file():
        module = _import_file(reference, path)
    else:
        try:
            module = importlib.import_module(target)
        except Exception as exc:
            raise PipelineLoadError(
                f"{reference!r}: cannot import module {target!r} ({type(exc).__name__}: "
                f"{exc}); check the module name or pass a file path") from exc
    try:
        return getattr(module, name)
    except AttributeError:
        raise PipelineLoadError(
            f"{reference!r}: {target} has no {name!r}; {_what_it_defines(module)}") from None


def _what_it_defines(module: Any) -> str:
    """The pipelines, units and functions a module defines itself (not what it imports)."""
    pipelines, runnable = [], []
    for key, value in vars(module).items():
        if key.startswith("_"):
            continue
        if isinstance(value, Pipeline):
            pipelines.append(key)
        elif isinstance(value, Unit) or (callable(value) and not isinstance(value, type)
                                         and getattr(value, "__module__", None)
                                         == module.__name__):
            runnable.append(key)
    if pipelines:
        return f"its pipelines are {', '.join(sorted(pipelines))}"
    if runnable:
        return (f"it defines no Pipeline; its units and functions are "
                f"{', '.join(sorted(runnable)[:12])}")
    return "it defines no pipeline, unit or function"


def _import_file(reference: str, path: Path) -> Any:
    if not path.is_file():
        raise PipelineLoadError(f"{reference!r}: no such file {str(path)!r}; check the path")
    module_name = f"fitwork_user_{path.stem}_{abs(hash(str(path.resolve()))) % 10**8}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PipelineLoadError(f"{reference!r}: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    module.__fitwork_by_value__ = True  # type: ignore[attr-defined]  # see Unit.__reduce__
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise PipelineLoadError(
            f"{reference!r}: importing {path} failed ({type(exc).__name__}: {exc})") from exc
    return module


def load_pipeline(reference: str) -> Pipeline:
    """The pipeline a reference names; a single unit or function becomes a one-unit pipeline."""
    obj = load_object(reference)
    if isinstance(obj, Pipeline):
        return obj
    if isinstance(obj, Unit) or callable(obj):
        return Pipeline(obj, name=getattr(obj, "name", getattr(obj, "__name__", "pipeline")))
    raise PipelineLoadError(f"{reference!r} is a {type(obj).__name__}, not a Pipeline or unit; "
                            "point at a fitwork.Pipeline")
