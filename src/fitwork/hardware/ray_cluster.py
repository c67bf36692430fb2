"""The one place fitwork talks to a Ray cluster as a whole: connecting, and reading its nodes.

Every call here has a deadline: a cluster that does not answer makes the caller fail with
one line naming what did not answer, never hang.  Ray itself is imported only when called.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from fitwork.errors import EngineError

NODE_TYPE_LABEL = "fitwork.node-type"
T = TypeVar("T")


def within(seconds: float, what: str, call: Callable[[], T]) -> T:
    """``call()``, or an `EngineError` naming ``what`` if it has not returned in ``seconds``.

    The call runs in a helper thread (Ray's Python API has no timeout on some calls, such
    as ``ray.nodes()``); past the deadline that thread is abandoned.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    helper = threading.Thread(target=run, daemon=True, name=f"fitwork-ray-{what}")
    helper.start()
    helper.join(seconds)
    if helper.is_alive():
        raise EngineError(f"Ray did not answer {what} within {seconds:g} s; check that the "
                          "cluster is up (ray status) and that --ray-address points at it")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def connect(address: str | None = None, timeout: float = 60.0) -> None:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``), or start one on this host."""
    import ray

    if ray.is_initialized():
        return
    target = address or os.environ.get("RAY_ADDRESS")
    where = f"ray.init({target!r})" if target else "ray.init() on this host"
    within(timeout, where, lambda: ray.init(address=target, include_dashboard=False,
                                            log_to_driver=True))


def live_nodes(timeout: float = 30.0) -> list[dict[str, Any]]:
    """The cluster's live nodes, in the shape ``ray.nodes()`` gives (``NodeID``, ``Alive``,
    ``Resources``, ``Labels``).

    Read through the connected worker's GCS client, which takes a timeout, rather than
    ``ray.nodes()``, whose separate state connection has been seen to hang in a process
    that also forks (the local engine's workers).
    """
    import ray

    client = ray._private.worker.global_worker.gcs_client
    try:
        table = within(timeout + 5, "the node table",
                       lambda: client.get_all_node_info(timeout=timeout))
    except EngineError:
        raise
    except Exception as exc:
        raise EngineError(f"Ray did not answer the node table within {timeout:g} s "
                          f"({type(exc).__name__}: {str(exc)[:200]}); check the cluster "
                          "(ray status)") from None
    nodes = []
    for info in table.values():
        if info.state != type(info).ALIVE:
            continue
        nodes.append({"NodeID": info.node_id.hex(), "Alive": True,
                      "Resources": dict(info.resources_total), "Labels": dict(info.labels)})
    return nodes


def cluster_resources(timeout: float = 30.0) -> dict[str, float]:
    """The total of every live node's resources."""
    total: dict[str, float] = {}
    for node in live_nodes(timeout):
        for name, amount in node["Resources"].items():
            total[name] = total.get(name, 0.0) + amount
    return total


def labelled_node_types(timeout: float = 30.0) -> set[str]:
    """The ``fitwork.node-type`` labels the live nodes carry."""
    return {label for n in live_nodes(timeout)
            if (label := (n.get("Labels") or {}).get(NODE_TYPE_LABEL))}
