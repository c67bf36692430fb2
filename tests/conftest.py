"""Shared fixtures: the engines every contract test runs against, and a local Ray cluster."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The test process both forks (local-engine workers) and drives Ray: gRPC must know before
# Ray starts it here (what `fitwork.hardware.ray_cluster.connect` does for a user's driver).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "1")
os.environ.setdefault("GRPC_POLL_STRATEGY", "poll")

# A suite started in the background by a shell without job control (`pytest &` in a
# script) has SIGINT ignored, and so would every process it starts: the tests that press
# Ctrl-C on a run need it delivered, as it is at a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ENGINES = ["local", "ray", "sim"]
PROCESS_ENGINES = ["local", "ray"]
FAILED = pytest.StashKey[bool]()


@contextlib.contextmanager
def short_temp(prefix: str) -> Iterator[Path]:
    """A fresh folder under /tmp for a Ray node's temp dir, removed after: Ray's Unix
    sockets live in it and their paths must stay under 108 bytes, which a folder under
    pytest's base temp (deeper still under pytest-xdist) does not promise."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class RayCluster:
    """A Ray cluster on this host for the test session; restarted after a failed test."""

    def __init__(self, temp: Path) -> None:
        self.temp = temp
        self.address = ""
        self.starts = 0

    def start(self) -> None:
        import ray

        self.starts += 1
        context = ray.init(num_cpus=16, object_store_memory=300 * 2**20,
                           include_dashboard=False, log_to_driver=False,
                           _temp_dir=str(self.temp / f"run{self.starts}"))
        self.address = context.address_info["gcs_address"]

    def restart(self) -> None:
        import ray

        ray.shutdown()
        self.start()


def uses_ray(item: pytest.Item) -> bool:
    """Whether a test drives a Ray cluster from this process (by fixture or parameter)."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return "ray_cluster" in getattr(item, "fixturenames", ()) or any(
        isinstance(p, str) and (p == "ray" or p.startswith("ray-") or p.startswith("ray_"))
        for p in params)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run every test that drives Ray from this process after all the others.

    The local engine forks this process for its workers; a fork taken while this process
    holds a Ray (gRPC) connection has been seen to leave that connection unanswered at
    random, however gRPC's fork support is set (a run then hung in a Ray test). With the
    Ray tests last, no local-engine test forks a process that is connected to Ray.
    """
    items.sort(key=uses_ray)  # stable: the order within each group stays


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Note on the test item whether it failed, for fixtures that clean up after failures."""
    report = yield
    if report.failed:
        item.stash[FAILED] = True
    return report


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """A Ray cluster on this host, started for the test session."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed: pip install 'fitwork[ray]'")
    import ray

    # Token authentication on, as fitwork starts a cluster for a user: a fresh token in the
    # environment, so the CLI runs the tests start with --ray-address inherit it.
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    with contextlib.suppress(ImportError):  # Ray read its config when imported: again
        from ray._raylet import Config

        Config.initialize("")
    with short_temp("fw-ray-") as temp:
        cluster = RayCluster(temp)
        cluster.start()
        try:
            yield cluster
        finally:
            ray.shutdown()


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """Name of the engine under test (starting the Ray cluster when it is Ray).

    A test that only means something where replicas are processes (kill -9, signals,
    shared memory, real time) marks itself with ``@pytest.mark.processes``; on the
    simulated engine it is skipped.  After a failed test on Ray the cluster is restarted,
    so one broken run cannot take the tests after it down with it.
    """
    if request.param == "sim" and request.node.get_closest_marker("processes"):
        pytest.skip("needs replicas that are processes; the simulated engine runs units "
                    "in this process on a virtual clock")
    cluster = request.getfixturevalue("ray_cluster") if request.param == "ray" else None
    yield request.param
    if cluster is not None and request.node.stash.get(FAILED, False):
        cluster.restart()
