"""The one place fitwork talks to a Ray cluster as a whole: connecting, and reading its nodes.

Every call here has a deadline: a cluster that does not answer makes the caller fail with
one line naming what did not answer, never hang.  Ray itself is imported only when called.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from fitwork.errors import EngineError

NODE_TYPE_LABEL = "fitwork.node-type"
T = TypeVar("T")


def within(seconds: float, what: str, call: Callable[[], T]) -> T:
    """``call()``, or an `EngineError` naming ``what`` if it has not returned in ``seconds``.

    The call runs in a helper thread (Ray's Python API has no timeout on some calls, such
    as ``ray.nodes()``); past the deadline that thread is abandoned.
    """
    values: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            values.append(call())
        except BaseException as exc:
            errors.append(exc)

    helper = threading.Thread(target=run, daemon=True, name=f"fitwork-ray-{what}")
    helper.start()
    helper.join(seconds)
    if helper.is_alive():
        raise EngineError(f"Ray did not answer {what} within {seconds:g} s; check that the "
                          "cluster is up (ray status) and that --ray-address points at it")
    if errors:
        raise errors[0]
    return values[0]


AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_AUTH_SINCE = (2, 52)
"""The first Ray release with token authentication."""


def has_token_auth(ray_version: str) -> bool:
    """Whether a Ray release of this version can authenticate with a token."""
    parts: list[int] = []
    for piece in ray_version.split(".")[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        parts.append(int(digits or 0))
    return tuple(parts) >= TOKEN_AUTH_SINCE


def local_auth_mode(environ: Mapping[str, str], ray_version: str) -> str | None:
    """The ``RAY_AUTH_MODE`` to start a new cluster on this host with, or None to leave it.

    A mode the user set is kept, "disabled" included; unset, it becomes "token" wherever Ray
    has token authentication, whatever that release's own default.
    """
    if AUTH_MODE_ENV in environ or not has_token_auth(ray_version):
        return None
    return "token"


def _set_auth_mode(mode: str) -> None:
    """Set ``RAY_AUTH_MODE`` for this process and its children, as Ray itself does: the
    environment, then Ray's cached config, read when ``ray`` was imported."""
    os.environ[AUTH_MODE_ENV] = mode
    try:
        from ray._raylet import Config
    except ImportError:
        return
    Config.initialize("")


FORK_SAFE_GRPC = {"GRPC_ENABLE_FORK_SUPPORT": "1", "GRPC_POLL_STRATEGY": "poll"}
"""What gRPC needs to survive a fork of the process that holds its connections: Ray sets it
for its workers but not for a driver (ray-project/ray#59661).  A fitwork driver forks (the
local engine's workers, a profile's units), and without it a Ray connection in that process
has been seen to stop answering (the node table, ``ray.cluster_resources()``)."""


def fork_safe_grpc() -> None:
    """Ask gRPC for fork support before Ray starts it in this process (a user's own choice,
    set in the environment, stands)."""
    for name, value in FORK_SAFE_GRPC.items():
        os.environ.setdefault(name, value)


def connect(address: str | None = None, timeout: float = 60.0) -> None:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``), or start one on this host.

    A cluster started here has Ray's token authentication on (Ray generates the token in
    ``~/.ray/auth_token``) unless ``RAY_AUTH_MODE`` says otherwise; joining leaves the
    cluster's own mode alone.  ``timeout`` bounds joining; a cluster started here lives as
    long as the calling thread (Ray's rule), so call this from the thread that keeps it.
    """
    fork_safe_grpc()
    import ray

    if ray.is_initialized():
        return
    target = address or os.environ.get("RAY_ADDRESS")
    mode = None if target else local_auth_mode(os.environ, ray.__version__)
    if mode is not None:
        _set_auth_mode(mode)
    if target:
        within(timeout, f"ray.init({target!r})",
               lambda: ray.init(address=target, include_dashboard=False, log_to_driver=True))
        return
    # Started here, in this thread: Ray ties the processes of a cluster it starts to the
    # thread that starts them (PR_SET_PDEATHSIG), so a helper thread (`within`) took the
    # whole cluster down with it as it ended, a moment after ray.init returned.
    ray.init(include_dashboard=False, log_to_driver=True)


def live_nodes(timeout: float = 30.0) -> list[dict[str, Any]]:
    """The cluster's live nodes, in the shape ``ray.nodes()`` gives (``NodeID``, ``Alive``,
    ``Resources``, ``Labels``, ``NodeManagerHostname``).

    Read through the connected worker's GCS client, which takes a timeout, rather than
    ``ray.nodes()``, whose separate state connection has been seen to hang in a process
    that also forks (the local engine's workers).
    """
    import ray

    client = ray._private.worker.global_worker.gcs_client
    first = min(timeout, 10.0)  # a healthy GCS answers in milliseconds
    try:
        table = within(first + 5, "the node table",
                       lambda: client.get_all_node_info(timeout=first))
    except Exception:
        # A driver that also forks (the local engine's workers) has been seen to lose its
        # connection to the GCS while the GCS answers everyone else at once (a fresh
        # connection from this process did no better): ask a task in the cluster instead.
        return _node_table_from_the_cluster(timeout)
    nodes = []
    for info in table.values():
        if info.state != type(info).ALIVE:
            continue
        nodes.append({"NodeID": info.node_id.hex(), "Alive": True,
                      "Resources": dict(info.resources_total), "Labels": dict(info.labels),
                      "NodeManagerHostname": getattr(info, "node_manager_hostname", "")})
    return nodes


def _node_table_from_the_cluster(timeout: float) -> list[dict[str, Any]]:
    """The live nodes as a zero-CPU task inside the cluster reads them (its own GCS
    connection); one line if that fails too."""
    import ray

    def read() -> list[dict[str, Any]]:
        return [{"NodeID": n["NodeID"], "Alive": True, "Resources": dict(n["Resources"]),
                 "Labels": dict(n.get("Labels") or {}),
                 "NodeManagerHostname": n.get("NodeManagerHostname", "")}
                for n in ray.nodes() if n["Alive"]]

    try:  # bounded whole: exporting the task talks to the GCS too, with no timeout of its own
        return within(timeout + 5, "the node table from a task",
                      lambda: ray.get(ray.remote(num_cpus=0)(read).remote(), timeout=timeout))
    except Exception as exc:
        raise EngineError(f"Ray did not answer the node table, here or from a task in the "
                          f"cluster ({type(exc).__name__}: {str(exc)[:200]}); check the "
                          "cluster (ray status)") from None


def cluster_resources(timeout: float = 30.0) -> dict[str, float]:
    """The total of every live node's resources."""
    total: dict[str, float] = {}
    for node in live_nodes(timeout):
        for name, amount in node["Resources"].items():
            total[name] = total.get(name, 0.0) + amount
    return total


def free_per_node(timeout: float = 10.0) -> dict[str, dict[str, float]]:
    """What each live node has free now (not held by an actor, task or placement group),
    by node id; a view Ray keeps eventually consistent, so read it as a hint."""
    from ray._private import state

    return within(timeout, "the free resources per node", state.available_resources_per_node)


# Ray's own notice of each worker or node death, printed on the driver's standard output
# ("(raylet) A worker died or was killed while executing a task ... SYSTEM_ERROR ...");
# each stays in Ray's logs (raylet.out, gcs_server.out) where it is written first.
DEATH_NOTICE = re.compile(r"A worker died or was killed|has been marked dead because|"
                          r"SYSTEM_ERROR|Worker exit type:", re.IGNORECASE)


class DeathNotices:
    """Keeps Ray's per-death notices off this driver's standard output while a fitwork
    run that handles those deaths is going (`hold` / `let_go`), and counts them.

    Ray prints its error channel through ``ray._private.worker.print_to_stdstream`` (the
    worker's own log lines take another path, which is left alone); a wrapper around it
    drops the death notices only, and only while some run holds it.
    """

    def __init__(self) -> None:
        self.holders = 0
        self.dropped = 0
        self.original: Callable[..., Any] | None = None

    def hold(self) -> None:
        """From now on until `let_go`, Ray's death notices are not printed here."""
        from ray._private import worker

        if self.original is None:
            self.original = worker.print_to_stdstream
            worker.print_to_stdstream = self.print
        self.holders += 1

    def let_go(self, after: float = 5.0) -> None:
        """Print them again, ``after`` seconds from now (Ray's notices of a run's last
        deaths arrive a moment after the run has dealt with them)."""
        def release() -> None:
            self.holders = max(0, self.holders - 1)

        timer = threading.Timer(after, release)
        timer.daemon = True
        timer.start()

    def print(self, data: dict[str, Any], ignore_prefix: bool) -> None:
        lines = data.get("lines") or []
        if self.holders and data.get("pid") == "raylet" and any(
                DEATH_NOTICE.search(str(line)) for line in lines):
            self.dropped += 1
            return
        assert self.original is not None
        self.original(data, ignore_prefix)


DEATHS = DeathNotices()


def deaths_line(names: list[str], core: Any, lost: set[str], refits: list[Any],
                forks: dict[int, int] | None = None) -> str:
    """One line for the deaths a run handled, by unit (``forks``, by stage: those of them
    that were a replica's forked unit process, the replica living on), and the nodes it
    lost; '' where none.  Ray's notice of each actor's death is in its logs, not on the
    user's output."""
    if core is None or not core.restarts:
        return ""
    forks = forks or {}
    by_unit = ", ".join(
        f"{name} {count}" + (f" ({forks[stage]} in a forked unit process)"
                             if forks.get(stage) else "")
        for stage, (name, count) in enumerate(zip(names, core.stage_deaths, strict=True))
        if count)
    nodes = f"; {len(lost)} node(s) lost ({', '.join(sorted(n[:8] for n in lost))}), " \
        f"{len(refits)} re-fit(s) in the run record" if lost else ""
    return (f"fitwork: {core.restarts} Ray replica death(s) handled ({by_unit}){nodes}; "
            f"{core.retries} retries, items kept; Ray's notice of each actor's death is in "
            "its logs (ray logs raylet.out)")
