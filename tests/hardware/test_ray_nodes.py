"""The Ray node table, read by the driver and, as the fallback, by a task in the cluster."""

from __future__ import annotations

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
