"""Which host runs were on: a Ray run on this very host is the same host as a local run."""

from __future__ import annotations

from html import escape

import fitwork
from fitwork import Pipeline
from fitwork.report.figures import compare_hosts, machines
from fitwork.report.html import default_labels, render_report
from tests.conftest import RayCluster
from tests.engine import units as u
from tests.report.records import HOST, record


def test_a_cluster_is_the_same_host_when_it_names_the_same_machines() -> None:
    local = {**HOST, "name": "box-1"}
    one_node = {"name": "Ray cluster of 1 nodes", "cores": 16.0, "memory": 10,
                "devices": {}, "hostnames": ["box-1"]}
    assert machines(one_node) == frozenset({"box-1"}) == machines(local)
    assert compare_hosts([local, one_node]) == "same host"
    assert compare_hosts([local, {**one_node, "hostnames": ["box-1", "box-2"]}]) == \
        "different hosts"
    assert compare_hosts([local, {**local, "name": "box-2"}]) == "different hosts"
    assert compare_hosts([local, None]) == "host not recorded"


def test_labels_name_the_layout_and_the_engine_where_engines_differ() -> None:
    runs = [record("m", throughput=100.0, units={"monolithic": (2, 1.0)}),
            record("f", throughput=120.0, units={"a": (1, 1.0), "b": (3, 0.5)})]
    runs[1] = runs[1].model_copy(update={"engine": "ray",
                                         "placement": {"source": "plan", "groups": []}})
    assert default_labels(runs) == ["monolithic [2 replicas] on local",
                                    "planned [demo: a x1, b x3] on ray"]
    planned_fused = runs[0].model_copy(update={"placement": {
        "source": "plan", "groups": [], "fusion": [["a", "b"]]}})
    (label,) = default_labels([planned_fused])
    assert label == "planned, fused [2 replicas]" and "monolith" not in label


def test_a_ray_run_on_this_host_is_the_same_host_as_a_local_run(
        ray_cluster: RayCluster) -> None:
    pipeline = Pipeline(u.double, u.slow_identity, name="hosts")
    records = []
    for engine in ("local", "ray"):
        with fitwork.run(pipeline, range(40), engine=engine) as result:
            assert sorted(result) == [2 * x for x in range(40)]
        records.append(result.record)
    ray_host = records[1].host or {}
    assert ray_host.get("hostnames") == sorted(machines(records[0].host or {}) or [])
    assert compare_hosts([r.host for r in records]) == "same host"
    page = render_report(records)
    assert "Runs compared: same host." in page
    assert escape("split [hosts: double x1, slow_identity x1] on ray") in page
