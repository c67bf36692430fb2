"""Resolve a ``MODULE_OR_FILE:NAME`` reference to a pipeline."""

from __future__ import annotations

import importlib
import importlib.util
import os
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
        module = _import_module(reference, target)
    try:
        return getattr(module, name)
    except AttributeError:
        raise PipelineLoadError(
            f"{reference!r}: {target} has no {name!r}; {_what_it_defines(module)}") from None


def _import_module(reference: str, target: str) -> Any:
    """Import ``target`` as ``python -m`` would: the current directory is on the path, so
    ``pipe:pipeline`` finds ``./pipe.py``.  A module found only there travels to other
    hosts by value (a Ray worker's directory is not this one)."""
    here = os.getcwd()
    added = "" not in sys.path and not any(_same_dir(entry, here) for entry in sys.path)
    if added:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(target)
    except Exception as exc:
        raise PipelineLoadError(
            f"{reference!r}: cannot import module {target!r} from {here} or the installed "
            f"packages ({type(exc).__name__}: {exc}); check the module name or pass a file "
            "path (dir/pipe.py:pipeline)") from exc
    top = sys.modules.get(target.partition(".")[0])
    origin = getattr(top, "__file__", None)
    if added and origin and any(_same_dir(str(folder), here)  # pipe.py or pipe/__init__.py
                                for folder in Path(origin).parents[:2]):
        for found in {id(top): top, id(module): module}.values():
            vars(found)["__fitwork_by_value__"] = True  # see Unit.__reduce__
    return module


def _same_dir(entry: str, here: str) -> bool:
    try:
        return os.path.samefile(entry or ".", here)
    except OSError:
        return False


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
    vars(module)["__fitwork_by_value__"] = True  # see Unit.__reduce__
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
