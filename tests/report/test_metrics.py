"""The Prometheus exporter: what it serves over HTTP, live during a real run, and where."""

from __future__ import annotations

import http.client
import importlib.util
import socket
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import click
import psutil
import pytest
from click.testing import CliRunner

import fitwork
from fitwork import Pipeline, unit
from fitwork.errors import FitworkError
from fitwork.report.metrics import (
    MetricsError,
    MetricsExporter,
    combine_progress,
    exporter_for,
    metrics_options,
)
from fitwork.telemetry.record import Progress

needs_client = pytest.mark.skipif(importlib.util.find_spec("prometheus_client") is None,
                                  reason="prometheus-client is not installed: "
                                  "pip install 'fitwork[metrics]'")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@unit
def nap(x: int) -> int:
    time.sleep(0.003)
    return x


@unit
def doze(x: int) -> int:
    time.sleep(0.002)
    return x + 1


@dataclass(frozen=True)
class RichProgress(Progress):
    """A snapshot carrying the per-unit figures the exporter reads when present."""

    units: dict[str, dict[str, float]] = field(default_factory=dict)


def scrape(url: str) -> Samples:
    """GET ``url`` and parse the Prometheus text format into {(name, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=5)
    try:
        connection.request("GET", where.path)
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/plain")
        text = response.read().decode()
    finally:
        connection.close()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def series(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def snapshot(elapsed: float, fed: int, completed: int, outputs: int, failures: int,
             **depths: int) -> Progress:
    return Progress(elapsed_s=elapsed, fed=fed, completed=completed, outputs=outputs,
                    failures=failures, depths=depths)


@needs_client
def test_synthetic_snapshots_are_served_over_http() -> None:
    with MetricsExporter(port=0) as exporter:
        assert exporter.port > 0
        assert exporter.url == f"http://127.0.0.1:{exporter.port}/metrics"
        exporter(snapshot(2.0, fed=40, completed=30, outputs=25, failures=1, read=7, work=3))
        first = scrape(exporter.url)
        assert value(first, "fitwork_items_fed_total") == 40
        assert value(first, "fitwork_items_completed_total") == 30
        assert value(first, "fitwork_outputs_total") == 25
        assert value(first, "fitwork_failures_total") == 1
        assert value(first, "fitwork_elapsed_seconds") == 2.0
        assert value(first, "fitwork_throughput_items_per_second") == pytest.approx(15.0)
        assert series(first, "fitwork_queue_depth") == {(("unit", "read"),): 7,
                                                        (("unit", "work"),): 3}

        exporter(snapshot(4.0, fed=100, completed=80, outputs=70, failures=2, read=0, work=5))
        second = scrape(exporter.url)
        assert value(second, "fitwork_items_completed_total") == 80
        assert value(second, "fitwork_items_fed_total") == 100
        assert value(second, "fitwork_failures_total") == 2
        assert value(second, "fitwork_queue_depth", unit="read") == 0
        assert value(second, "fitwork_throughput_items_per_second") == pytest.approx(20.0)

        # a figure that falls does not pull a counter down; later rises count from there
        exporter(snapshot(5.0, fed=100, completed=60, outputs=70, failures=2))
        assert value(scrape(exporter.url), "fitwork_items_completed_total") == 80
        exporter(snapshot(6.0, fed=100, completed=65, outputs=70, failures=2))
        assert value(scrape(exporter.url), "fitwork_items_completed_total") == 85

        # a second run through the same exporter adds to the counters
        exporter(snapshot(0.5, fed=10, completed=10, outputs=10, failures=0))
        third = scrape(exporter.url)
        assert value(third, "fitwork_items_completed_total") == 95
        assert value(third, "fitwork_items_fed_total") == 110
        assert value(third, "fitwork_elapsed_seconds") == 0.5
        for name in ("fitwork_items_completed_total", "fitwork_items_fed_total",
                     "fitwork_outputs_total", "fitwork_failures_total"):
            assert value(first, name) <= value(second, name) <= value(third, name)


@needs_client
def test_per_unit_figures_from_a_richer_snapshot() -> None:
    with MetricsExporter() as exporter:
        plain = scrape(exporter.url)
        assert not series(plain, "fitwork_unit_busy_seconds_total")
        exporter(RichProgress(elapsed_s=2.0, fed=10, completed=10, outputs=10, failures=0,
                              depths={"decode": 1}, units={
            "decode": {"busy_s": 3.0, "cpu_s": 2.5, "replicas": 2, "items_in": 10,
                       "items_out": 9},
        }))
        exporter(RichProgress(elapsed_s=4.0, fed=20, completed=20, outputs=20, failures=0,
                              depths={"decode": 0}, units={
            "decode": {"busy_s": 6.0, "cpu_s": 4.0, "replicas": 2, "items_in": 20,
                       "items_out": 18},
        }))
        samples = scrape(exporter.url)
    assert value(samples, "fitwork_unit_busy_seconds_total", unit="decode") == 6.0
    assert value(samples, "fitwork_unit_cpu_seconds_total", unit="decode") == 4.0
    assert value(samples, "fitwork_unit_items_total", unit="decode", direction="in") == 20
    assert value(samples, "fitwork_unit_items_total", unit="decode", direction="out") == 18
    assert value(samples, "fitwork_unit_replicas", unit="decode") == 2
    assert value(samples, "fitwork_unit_utilization", unit="decode") == pytest.approx(0.75)


@needs_client
def test_a_live_run_is_scraped_while_it_runs() -> None:
    items = 300
    pipeline = Pipeline(nap, doze, name="sleepy")
    scrapes: list[Samples] = []
    with MetricsExporter() as exporter:
        with fitwork.run(pipeline, range(items), progress=exporter,
                         progress_interval=0.02) as result:
            for count, _ in enumerate(result, start=1):
                if count in (items // 4, items // 2, 3 * items // 4):
                    scrapes.append(scrape(exporter.url))
        final = scrape(exporter.url)
    assert len(scrapes) == 3
    completed = [value(s, "fitwork_items_completed_total") for s in scrapes]
    assert completed == sorted(completed)
    assert completed[0] < completed[-1] <= items
    assert completed[0] < items
    for during in scrapes:
        assert set(series(during, "fitwork_queue_depth")) == {(("unit", "nap"),),
                                                              (("unit", "doze"),)}
        assert value(during, "fitwork_elapsed_seconds") > 0
    assert value(final, "fitwork_items_completed_total") == items
    assert value(final, "fitwork_items_fed_total") == items
    assert value(final, "fitwork_outputs_total") == items
    assert value(final, "fitwork_failures_total") == 0
    assert value(final, "fitwork_throughput_items_per_second") > 0


def _outside_address() -> str | None:
    """An IPv4 address of this host that is not loopback, if it has one."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return None


@needs_client
def test_the_server_binds_loopback_by_default() -> None:
    with MetricsExporter(port=0) as exporter:
        assert exporter.host == "127.0.0.1"
        assert exporter._server is not None
        assert exporter._server.server_address[0] == "127.0.0.1"
        outside = _outside_address()
        if outside is not None:
            with pytest.raises(OSError):
                socket.create_connection((outside, exporter.port), timeout=2).close()
        port = exporter.port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


@needs_client
def test_a_taken_port_is_a_clear_error() -> None:
    with MetricsExporter() as exporter, pytest.raises(MetricsError, match="--metrics-port"):
        MetricsExporter(port=exporter.port)


@needs_client
def test_cli_options_and_exporter_for() -> None:
    seen: dict[str, object] = {}

    @click.command()
    @metrics_options
    def command(metrics_port: int | None, metrics_host: str) -> None:
        seen.update(port=metrics_port, host=metrics_host)
        with exporter_for(metrics_port, metrics_host) as exporter:
            seen["exporter"] = exporter
            if exporter is not None:
                seen["port_bound"] = exporter.port
                progress = combine_progress(None, exporter)
                assert progress is exporter
                progress(snapshot(1.0, fed=3, completed=3, outputs=3, failures=0))
                seen["scraped"] = value(scrape(exporter.url), "fitwork_items_completed_total")

    runner = CliRunner()
    assert runner.invoke(command, []).exit_code == 0
    assert seen == {"port": None, "host": "127.0.0.1", "exporter": None}
    result = runner.invoke(command, ["--metrics-port", "0"])
    assert result.exit_code == 0, result.output
    assert seen["host"] == "127.0.0.1"
    assert isinstance(seen["port_bound"], int) and seen["port_bound"] > 0
    assert seen["scraped"] == 3
    assert runner.invoke(command, ["--metrics-port", "70000"]).exit_code == 2
    assert "--metrics-host" in runner.invoke(command, ["--help"]).output


def test_combine_progress_calls_each() -> None:
    calls: list[str] = []
    combined = combine_progress(lambda s: calls.append("a"), None, lambda s: calls.append("b"))
    assert combined is not None
    combined(snapshot(1.0, 1, 1, 1, 0))
    assert calls == ["a", "b"]
    assert combine_progress(None, None) is None


def test_missing_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MetricsError, match=r"fitwork\[metrics\]") as caught:
        MetricsExporter()
    assert isinstance(caught.value, FitworkError)
