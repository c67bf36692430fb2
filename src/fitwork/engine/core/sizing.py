"""Frame sizes: how many items travel together into each stage, decided here for every engine.

The run core sizes each stage's frames from what its workers measured (`frame_size`).  An
engine whose replicas send their outputs on themselves (Ray's) cuts a call's outputs into
frames by `cut`, from the sizes the core hands it (0 for a stage not measured yet).
"""

from __future__ import annotations

from fitwork.engine.core.events import Stage
from fitwork.engine.core.policy import Policy

KILLER_SHARE = 0.1
"""Once a stage's workers die, its frames hold about this share of a death's worth of
items: a death (which loses its frame) takes few innocent rows with it."""
FANOUT = 64
"""The most frames one call's outputs go downstream in (`cut`)."""


def frame_size(policy: Policy, stage: Stage, current: int, items: int, busy: float,
               deaths: int) -> int:
    """Items per frame into ``stage``: about ``frame_time`` of its measured work (``busy``
    seconds over ``items``), a batch at least, within ``max_frame``; an I/O unit's frames a
    share of its calls in flight; and once its workers die losing their frames
    (``deaths``: those that lost only the item they died in too, where the policy says so,
    ``named_shrink``), few enough that a death loses about ``KILLER_SHARE`` of one.
    ``current`` until something is measured."""
    if not items:
        return current
    per_item = max(busy / items, 1e-7)
    size = int(min(policy.max_frame, max(stage.batch_size or 1, policy.frame_time / per_item)))
    if stage.io:  # its items run side by side: a frame of them takes about one call's time
        size = min(policy.max_frame, max(1, int(stage.io * policy.io_frame_share)))
    if deaths:  # rows that kill: frames few of which hold one (a death loses the frame)
        size = min(size, max(1, int(KILLER_SHARE * (items + deaths) / deaths)))
    return size


def cut(total: int, size: int, replicas: int) -> int:
    """Items per frame for ``total`` outputs of one call into the next stage, whose replicas
    number ``replicas``: the stage's ``size``; before it is measured (``size`` 0), one frame
    per replica of it, twice over, rather than the one item per frame a default would give
    (a reader's shard became thousands of one-row calls down the chain); and never more
    than ``FANOUT`` frames."""
    if size <= 0:
        size = -(-total // (2 * max(1, replicas)))
    return max(1, size, -(-total // FANOUT))


__all__ = ["FANOUT", "KILLER_SHARE", "cut", "frame_size"]
