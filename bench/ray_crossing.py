"""What a frame costs to cross Ray nodes, against the same hand-off within one node.

On a Ray cluster of three nodes started on this host (`ray_cluster_local.LocalCluster`:
each node its own ``ray start``, temp dir and capped object store), a sender actor on one
worker node calls a receiver actor with a numpy array as the argument, as a fitwork replica
hands a frame to the next unit's (``process.remote(frame, ...)``, four calls in flight).
The receiver sits on the sender's node (same) or on the other worker node (cross).  For
each frame size, the cluster's CPU-seconds (every process of its nodes: raylets, object
stores, workers) and the wall seconds per frame are read, same and cross by turns in both
orders, the least of each kept.  Inline frames are compared as they are; for frames through the
object store a line through (bytes, CPU per frame) of the differences cross - same gives
the fixed and the per-byte cost of a crossing: what the cost model
charges a frame that crosses nodes (`fitwork.engine.ray.costs.CROSS_NODE_FRAME_CPU_S`,
`CROSS_NODE_BYTE_CPU_S`).  Arrays under Ray's 100 KiB inline limit travel inside the call;
larger ones go through the object store (pulled by the receiver's node when it is another).

    .venv/bin/python bench/ray_crossing.py [--frames N] [--sizes 1024,65536,...] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
from ray_cluster_local import LocalCluster

INLINE_MAX = 100 * 1024
"""Ray passes an argument under this many bytes inside the call (its
``max_direct_call_object_size``), larger ones through the object store."""


def make_actors() -> tuple[Any, Any]:
    """The sender and receiver classes as Ray actors (Ray imported here)."""
    import ray

    @ray.remote(num_cpus=0)
    class Receiver:
        def take(self, frame: np.ndarray) -> int:
            return int(frame[-1]) if frame.size else 0

    @ray.remote(num_cpus=0)
    class Sender:
        def send(self, receiver: Any, frames: int, nbytes: int, in_flight: int = 4) -> float:
            frame = np.ones(max(1, nbytes // 8))
            start, pending = time.perf_counter(), []
            for _ in range(frames):
                pending.append(receiver.take.remote(frame))
                if len(pending) >= in_flight:
                    done, pending = ray.wait(pending, num_returns=1)
                    ray.get(done)
            ray.get(pending)
            return time.perf_counter() - start

        def ping(self) -> str:
            return ray.get_runtime_context().get_node_id()

    return Sender, Receiver


def placed(actor: Any, node_id: str) -> Any:
    """``actor`` pinned to the node ``node_id``."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys over xs."""
    slope, intercept = np.polyfit(np.array(xs, dtype=float), np.array(ys, dtype=float), 1)
    return float(intercept), float(slope)


def measure(cluster: LocalCluster, frames: int, sizes: list[int], repeats: int
            ) -> dict[str, dict[int, tuple[float, float]]]:
    """Per placement (``same``, ``cross``) and frame size: the least (CPU-s, wall-s) per
    frame over ``repeats`` rounds, same and cross by turns, the order flipped each round."""
    import ray

    nodes = sorted((n for n in ray.nodes() if n["Alive"]), key=cluster.node_of)
    ids = [n["NodeID"] for n in nodes]
    Sender, Receiver = make_actors()
    sender = placed(Sender, ids[1]).remote()
    receivers = {"same": placed(Receiver, ids[1]).remote(),
                 "cross": placed(Receiver, ids[2]).remote()}
    ray.get(sender.ping.remote())
    for receiver in receivers.values():  # warm: both paths once, small and large
        ray.get(sender.send.remote(receiver, 8, 1 << 20))
    best: dict[str, dict[int, tuple[float, float]]] = {"same": {}, "cross": {}}
    for turn in range(repeats):
        order = ["same", "cross"] if turn % 2 == 0 else ["cross", "same"]
        for nbytes in sizes:
            for where in order:
                before = cluster.cpu_seconds()
                wall = ray.get(sender.send.remote(receivers[where], frames, nbytes))
                time.sleep(0.15)  # the sampler's last look
                cpu = (cluster.cpu_seconds() - before) / frames
                old = best[where].get(nbytes, (np.inf, np.inf))
                best[where][nbytes] = (min(old[0], cpu), min(old[1], wall / frames))
    return best


def report(best: dict[str, dict[int, tuple[float, float]]], load: tuple[float, ...]) -> None:
    """The table per size, the fitted lines, and the cross - same figures."""
    sizes = sorted(best["same"])
    print(f"{'bytes':>10} {'same CPU us':>12} {'cross CPU us':>13} {'same wall us':>13} "
          f"{'cross wall us':>14}")
    for nbytes in sizes:
        (sc, sw), (xc, xw) = best["same"][nbytes], best["cross"][nbytes]
        print(f"{nbytes:>10,} {sc * 1e6:>12.0f} {xc * 1e6:>13.0f} {sw * 1e6:>13.0f} "
              f"{xw * 1e6:>14.0f}")
    stored = [n for n in sizes if n >= INLINE_MAX]
    inline = [n for n in sizes if n < INLINE_MAX]
    for where in ("same", "cross"):
        if len(stored) >= 2:
            (a, b), (wa, wb) = (fit_line([float(n) for n in stored],
                                         [best[where][n][i] for n in stored]) for i in (0, 1))
            print(f"{where}, through the object store: CPU {a * 1e6:.0f} us per frame + "
                  f"{b * 1e9:.3f} ns per byte; wall {wa * 1e6:.0f} us + {wb * 1e9:.3f} ns/B")
    if inline:
        cpu = np.mean([best["cross"][n][0] - best["same"][n][0] for n in inline])
        wall = np.mean([best["cross"][n][1] - best["same"][n][1] for n in inline])
        print(f"cross - same, inline frames (< {INLINE_MAX:,} bytes): CPU {cpu * 1e6:.0f} us, "
              f"wall {wall * 1e6:.0f} us per frame")
    if len(stored) >= 2:
        diff = [[best["cross"][n][i] - best["same"][n][i] for n in stored] for i in (0, 1)]
        (a, b), (wa, wb) = (fit_line([float(n) for n in stored], d) for d in diff)
        print(f"cross - same, through the object store: CPU {a * 1e6:.0f} us per frame + "
              f"{b * 1e9:.3f} ns per byte; wall {wa * 1e6:.0f} us per frame + "
              f"{wb * 1e9:.3f} ns per byte")
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (a shared host)")


def sizes_arg(text: str) -> list[int]:
    """Frame sizes from a comma-separated list."""
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    """Start three nodes, measure both placements, print, stop the cluster."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300, help="frames per measurement")
    parser.add_argument("--sizes", type=sizes_arg, default=[1024, 65536, 262144, 1048576, 4194304],
                        help="frame sizes in bytes")
    parser.add_argument("--repeats", type=int, default=2, help="rounds, order flipped each")
    args = parser.parse_args()
    import ray

    cluster = LocalCluster(3, cpus=1.0)
    address = cluster.start()
    try:
        ray.init(address=address, log_to_driver=False)
        print(f"Ray {ray.__version__}: 3 nodes on this host ({os.cpu_count()} cores), "
              f"{args.frames} frames per figure, least of {args.repeats} rounds")
        best = measure(cluster, args.frames, args.sizes, max(1, args.repeats))
        report(best, os.getloadavg())
    finally:
        ray.shutdown()
        cluster.stop()


if __name__ == "__main__":
    main()
