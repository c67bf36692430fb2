"""A replica takes the bundle its plan reserved for its unit on its planned node, not the
first free one of the same shape (which put a chatty pair's replicas on different nodes)."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="Ray is not installed: pip install 'fitwork[ray]'")


def test_each_unit_takes_the_bundles_held_for_it() -> None:
    from fitwork.engine.ray.placing import Bundle, Placing
    from fitwork.placement import Group
    from fitwork.resources import Resources

    shape = Resources(cpu=0.5)
    placing = Placing()
    placing.names = ["send", "take"]
    # node 0 holds one of each; node 1 one of each: bundles listed node by node
    placing.bundles = [Bundle("g0", 0, "cpu", shape, unit="send"),
                       Bundle("g0", 1, "cpu", shape, unit="take"),
                       Bundle("g1", 0, "cpu", shape, unit="send"),
                       Bundle("g1", 1, "cpu", shape, unit="take")]
    send, take = Group("send", 2, node_type="cpu"), Group("take", 2, node_type="cpu")
    taken = []
    for stage, group in ((0, send), (0, send), (1, take), (1, take)):
        index = placing.pick_bundle(stage, group, shape)
        assert index is not None
        placing.bundles[index].holder = len(taken)
        taken.append(index)
    assert [placing.bundles[i].unit for i in taken] == ["send", "send", "take", "take"]
    assert {placing.bundles[i].group for i in taken[:2]} == {"g0", "g1"}  # one per node
    # a replacement takes the bundle its predecessor freed, on the same node
    placing.bundles[taken[2]].holder = None
    assert placing.pick_bundle(1, take, shape) == taken[2]
    assert placing.pick_bundle(0, Group("send", 1), shape) is None  # no node type: no bundle
