"""Fusion: join neighbouring units where moving data between them costs more than splitting gains.

Pure: measured pieces in, join decisions out.  For neighbours ``a`` then ``b``, with
``transfer = HOP_S + bytes(a -> b) / BANDWIDTH`` per item:

- same kind, ``cpu`` or ``io``: join.  Both draw on the same pool (cores, or I/O slots and
  the core that drives them), so splitting them recovers nothing a replica of the joined
  unit would not, and every item would pay the transfer (pickled by one process, unpickled
  by the other).  This is operator fusion as Flink's chaining and Ray Data's map fusion do it.
- same kind, ``gpu``: join when ``transfer >= min(wall a, wall b)``; apart, they may still
  pay by landing on different accelerator classes, unless moving the data costs more than
  the smaller one takes.
- different kinds: join when ``transfer >= wall`` of the smaller piece (of the unhinted one
  when the other is hinted): it costs more to move its data than to run it, so giving it
  its own resource cannot pay.  Two hinted pieces of different kinds never join.
- an unhinted trivial piece joins a neighbour whatever the kinds: one that computes under
  ``TRIVIAL_S`` and waits under ``MIN_WAIT_S`` per item (CPU time, so that a busy host's
  preemptions do not make it look long).  At that size its measured kind is noise, and a
  hop (a frame pickled, a worker woken) costs about as much as the piece.

The pair with the largest transfer / time ratio joins first (same-kind cpu and io pairs
before any other); then the figures are recomputed and the next is chosen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from fitwork.decomposition.hints import HintKind

BANDWIDTH = 1e9
"""Bytes per second assumed between two processes on one host (pickle + channel copy)."""
HOP_S = 20e-6
"""Fixed cost of one hop between processes, per item (framing, a wake-up)."""
TRIVIAL_S = 1e-4
"""CPU seconds per item under which a piece that barely waits is bookkeeping."""
MIN_WAIT_S = 5e-4
"""Waiting (wall - CPU seconds) per item under which the wait is noise, not I/O."""
POOLED = ("cpu", "io")
"""Kinds whose units share one pool on a host, so that splitting them never adds capacity."""


@dataclass(frozen=True)
class Piece:
    """One unit's measurement, as fusion sees it (figures per input item)."""

    kind: HintKind
    hinted: bool
    wall_s: float
    cpu_s: float
    bytes_out: float


@dataclass(frozen=True)
class Decision:
    """Join ``pieces[at]`` with ``pieces[at + 1]`` (indices into the list at that step)."""

    at: int
    rule: Literal["kind", "transfer", "trivial"]
    reason: str
    bytes: float
    transfer_s: float
    time_s: float

    @property
    def urgency(self) -> float:
        """How clearly splitting loses: transfer over time (infinite for a pooled kind)."""
        if self.rule == "kind":
            return math.inf
        return self.transfer_s / max(self.time_s, 1e-12)


def is_trivial(piece: Piece, trivial_s: float = TRIVIAL_S) -> bool:
    """An unhinted piece that neither computes nor waits for long."""
    return not piece.hinted and piece.cpu_s < trivial_s \
        and piece.wall_s - piece.cpu_s < MIN_WAIT_S


def combine(a: Piece, b: Piece) -> Piece:
    """The piece two neighbours make together: a hinted kind wins, else the longer one's
    (a piece of trivial length has no kind worth keeping)."""
    if a.hinted != b.hinted:
        kind = a.kind if a.hinted else b.kind
    else:
        kind = a.kind if a.wall_s >= b.wall_s else b.kind
    return Piece(kind=kind, hinted=a.hinted or b.hinted, wall_s=a.wall_s + b.wall_s,
                 cpu_s=a.cpu_s + b.cpu_s, bytes_out=b.bytes_out)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _candidate(at: int, a: Piece, b: Piece, bandwidth: float, hop_s: float,
               trivial_s: float) -> Decision | None:
    transfer = hop_s + a.bytes_out / bandwidth
    moving = f"moving {a.bytes_out:,.0f} B costs {_ms(transfer)} per item"
    trivial = [p for p in (a, b) if is_trivial(p, trivial_s)]
    if trivial and a.kind != b.kind:
        piece = min(trivial, key=lambda p: p.cpu_s)
        which = "the first" if piece is a else "the second"
        return Decision(at, "trivial", f"{which} computes {_ms(piece.cpu_s)} per item and "
                        "hardly waits: not worth a hop of its own", a.bytes_out, transfer,
                        piece.wall_s)
    if a.kind == b.kind and a.kind in POOLED:
        return Decision(at, "kind", f"all {a.kind}: they share one pool, so splitting "
                        "recovers nothing a replica of the joined unit would not, and every "
                        "item would pay the move", a.bytes_out, transfer, min(a.wall_s, b.wall_s))
    if a.kind != b.kind and a.hinted and b.hinted:
        return None
    smaller = min((p for p in (a, b) if not p.hinted or a.kind == b.kind),
                  key=lambda p: p.wall_s)
    if transfer < smaller.wall_s:
        return None
    which = "the first" if smaller is a else "the second"
    kinds = f"both {a.kind}" if a.kind == b.kind else f"{a.kind} then {b.kind}"
    return Decision(at, "transfer", f"{kinds}: {moving}, more than the {_ms(smaller.wall_s)} "
                    f"{which} takes, so splitting cannot pay", a.bytes_out, transfer,
                    smaller.wall_s)


def plan_fusion(pieces: list[Piece], *, bandwidth: float = BANDWIDTH, hop_s: float = HOP_S,
                trivial_s: float = TRIVIAL_S) -> tuple[list[Piece], list[Decision]]:
    """The pieces after fusion and the joins that made them, in the order they were made."""
    current = list(pieces)
    decisions: list[Decision] = []
    while len(current) > 1:
        found = [d for at in range(len(current) - 1)
                 if (d := _candidate(at, current[at], current[at + 1], bandwidth, hop_s,
                                     trivial_s))]
        if not found:
            break
        best = max(found, key=lambda d: d.urgency)
        joined = combine(current[best.at], current[best.at + 1])
        current = [*current[:best.at], joined, *current[best.at + 2:]]
        decisions.append(best)
    return current, decisions
