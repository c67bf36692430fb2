"""Shared fixtures: the engines every contract test runs against, and a local Ray cluster."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

ENGINES = ["local", "ray"]


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray cluster on this host, started for the test session; yields its address."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed: pip install 'fitwork[ray]'")
    import ray

    os.environ["RAY_AUTH_MODE"] = "disabled"
    temp = tmp_path_factory.mktemp("ray")
    context = ray.init(num_cpus=16, object_store_memory=300 * 2**20, include_dashboard=False,
                       _temp_dir=str(temp), log_to_driver=False)
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Name of the engine under test (starting the Ray cluster when it is Ray)."""
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param
