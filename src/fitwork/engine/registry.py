"""The engines fitwork knows, by name, loaded on first use (the contract stays import-free)."""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

from fitwork.errors import UnitDefinitionError

if TYPE_CHECKING:
    from fitwork.engine.contract import Engine

# name: (module, class, the extra it needs or None)
ENGINES: dict[str, tuple[str, str, str | None]] = {
    "local": ("fitwork.engine.local", "LocalEngine", None),
    "ray": ("fitwork.engine.ray", "RayEngine", "ray"),
    "sim": ("fitwork.engine.sim", "SimEngine", None),
}


def needs_extra(what: str, extra: str) -> str | None:
    """The one line saying ``what`` needs the package ``extra`` and how to install it, or
    ``None`` where it is installed."""
    if importlib.util.find_spec(extra) is not None:
        return None
    return f"{what} needs {extra.title()}: install the extra with pip install 'fitwork[{extra}]'"


def get_engine(name: str) -> Engine:
    """The engine registered as ``name``; says which extra to install when one is missing."""
    if name not in ENGINES:
        raise UnitDefinitionError(f"engine {name!r} is unknown; the engines are: "
                                  f"{', '.join(ENGINES)}")
    module, cls, extra = ENGINES[name]
    missing = None if extra is None else needs_extra(f"engine {name!r}", extra)
    if missing is not None:
        raise UnitDefinitionError(missing)
    engine: Engine = getattr(importlib.import_module(module), cls)()
    return engine
