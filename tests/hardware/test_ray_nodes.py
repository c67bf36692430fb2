"""The Ray node table, read by the driver and, as the fallback, by a task in the cluster."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_a_task_in_the_cluster_reads_the_same_live_nodes(ray_cluster: object) -> None:
    from fitwork.hardware.ray_cluster import _node_table_from_the_cluster, live_nodes

    here = live_nodes()
    assert here and all(n["Alive"] and n["Resources"].get("CPU", 0) > 0 for n in here)
    assert _node_table_from_the_cluster(30.0) == here


@pytest.mark.parametrize("timeout", [0.001])
def test_a_fallback_that_cannot_answer_says_so_in_one_line(ray_cluster: object,
                                                          timeout: float) -> None:
    from fitwork.errors import EngineError
    from fitwork.hardware.ray_cluster import _node_table_from_the_cluster

    with pytest.raises(EngineError, match=r"^Ray did not answer the node table, here or from"):
        _node_table_from_the_cluster(timeout)


OUTLIVES = """
import time, ray
from fitwork.hardware.ray_cluster import connect, live_nodes
connect(timeout=120)
time.sleep(3)  # the helper thread that once started it has long ended
print(len(live_nodes(timeout=20)), ray.cluster_resources().get("CPU", 0) > 0)
ray.shutdown()
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_cluster_fitwork_starts_outlives_the_call_that_started_it(tmp_path: Path) -> None:
    """Ray ties a cluster it starts to the thread that starts it: started from a helper
    thread, every process of it was killed a moment after ``connect`` returned (a
    `fitwork run --engine ray` with no cluster to join then lost its GCS)."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed: pip install 'fitwork[ray]'")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["HOME"] = str(tmp_path)  # a token, if Ray makes one, lands here
    done = subprocess.run([sys.executable, "-c", OUTLIVES], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["1", "True"], done.stdout
