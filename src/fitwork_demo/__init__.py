"""``fitwork demo``: OCR of generated pages on this host, fitted vs the best swept layouts.

Install the extra (``pip install 'fitwork[demo]'``), then ``fitwork demo`` or, in Python::

    from fitwork_demo import DemoConfig, run_demo
    result = run_demo(DemoConfig(images=24, latencies_ms=(30, 150)))
    for sweep in result.sweeps:
        print(sweep.latency_ms, sweep.best_monolith.layout.title, sweep.over_monolith)

Names load on first use, so importing the command (``fitwork_demo.cli``) stays light.
"""

from __future__ import annotations

from typing import Any

from fitwork_demo.config import ACCURACY_THRESHOLD, DemoConfig

_LAZY = {"DemoResult": "fitwork_demo.run", "run_demo": "fitwork_demo.run"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fitwork_demo' has no attribute {name!r}")


__all__ = ["ACCURACY_THRESHOLD", "DemoConfig", "DemoResult", "run_demo"]
