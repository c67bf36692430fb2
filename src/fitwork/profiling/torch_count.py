"""FLOPs and device bytes of one call of a PyTorch unit, counted by torch (no timing).

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode``.  Device bytes are what the
call's operators read and write: every tensor an aten operator takes (weights read on each
call, activations) and every tensor it returns (activations written), counted once per
operator that touches it, as a kernel would stream it through device memory.  Views (a
transpose, a reshape) move nothing and are left out, and so are tensors torch holds as
shapes only.  Caches and fused kernels make real traffic lower, so the figure is an upper
bound that keeps the cost model's bound (compute or memory) on the safe side for weights-heavy
units, which are the ones device bytes decide.

torch stays optional: `count` returns ``(None, None)`` unless the unit's process has
already imported torch (a unit that does not use it pays nothing).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def count(call: Callable[[list[Any]], Any], batch: list[Any]
          ) -> tuple[float | None, float | None]:
    """FLOPs and device bytes per item of ``call(batch)``; ``None`` for what torch counted as
    zero, both ``None`` where torch is not loaded or counting failed."""
    if sys.modules.get("torch") is None or not batch:
        return None, None
    try:
        flops, nbytes = _count(call, batch)
    except Exception:  # a unit torch cannot trace still profiles, without the counts
        return None, None
    per = len(batch)
    return (flops / per if flops else None), (nbytes / per if nbytes else None)


def _count(call: Callable[[list[Any]], Any], batch: list[Any]) -> tuple[float, float]:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import FlopCounterMode

    class Traffic(TorchDispatchMode):
        """Sums the bytes of every tensor each non-view aten operator reads and writes."""

        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if not getattr(func, "is_view", False):
                for value in tree_flatten((args, kwargs or {}, out))[0]:
                    if isinstance(value, torch.Tensor) and value.device.type != "meta":
                        self.total += value.numel() * value.element_size()
            return out

    flops = FlopCounterMode(display=False)
    traffic = Traffic()
    with torch.no_grad(), flops, traffic:
        call(batch)
    return float(flops.get_total_flops()), float(traffic.total)
