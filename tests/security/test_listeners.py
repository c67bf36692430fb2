"""What listens: the metrics server and the demo's store bind loopback unless asked."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fitwork_demo.server import DocumentStore

from .conftest import run_cli


def listening() -> set[tuple[str, int]]:
    """Every TCP socket in LISTEN state on this host, as (address, port), from /proc."""
    found: set[tuple[str, int]] = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            raw, port = fields[1].split(":")
            packed = bytes.fromhex(raw)
            # /proc prints the address as host-order 32-bit words
            packed = b"".join(packed[i:i + 4][::-1] for i in range(0, len(packed), 4))
            found.add((socket.inet_ntop(family, packed), int(port, 16)))
    return found


def other_addresses() -> list[str]:
    """This host's IPv4 addresses that are not loopback (may be none)."""
    addresses = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            addresses.add(str(info[4][0]))
    except OSError:
        pass
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
        addresses.add(probe.getsockname()[0])
    except OSError:
        pass
    finally:
        probe.close()
    return sorted(a for a in addresses if not a.startswith("127.") and a != "0.0.0.0")


def refused_from(address: str, port: int) -> bool:
    """Whether a TCP connection to ``address:port`` is refused."""
    try:
        with socket.create_connection((address, port), timeout=2):
            return False
    except OSError:
        return True


def test_metrics_server_listens_on_loopback_only_by_default() -> None:
    pytest.importorskip("prometheus_client")
    from fitwork.report.metrics import MetricsExporter

    with MetricsExporter(port=0) as exporter:
        bound = {address for address, port in listening() if port == exporter.port}
        assert bound == {"127.0.0.1"}
        assert exporter.url == f"http://127.0.0.1:{exporter.port}/metrics"
        with socket.create_connection(("127.0.0.1", exporter.port), timeout=2):
            pass
        for address in other_addresses():
            assert refused_from(address, exporter.port), address
    assert all(port != exporter.port for _, port in listening())


def test_metrics_server_binds_elsewhere_only_when_asked() -> None:
    pytest.importorskip("prometheus_client")
    from fitwork.report.metrics import MetricsExporter

    with MetricsExporter(port=0, host="0.0.0.0") as exporter:
        bound = {address for address, port in listening() if port == exporter.port}
        assert bound == {"0.0.0.0"}


def test_cli_serves_metrics_on_loopback_by_default(project: Path) -> None:
    pytest.importorskip("prometheus_client")
    done = run_cli("run", "squares.py:pipeline", "--input", "in.jsonl", "--output", "out.jsonl",
                   "--max-failures", "5", "--metrics-port", "0", "-q", cwd=project)
    assert done.returncode == 0, done.stderr
    assert "serving metrics on http://127.0.0.1:" in done.stderr


def test_demo_store_listens_on_loopback_only() -> None:
    store = DocumentStore({"a": b"png"}).start()
    try:
        port = int(store.base_url.rsplit(":", 1)[1])
        assert store.base_url == f"http://127.0.0.1:{port}"
        bound = {address for address, p in listening() if p == port}
        assert bound == {"127.0.0.1"}
        for address in other_addresses():
            assert refused_from(address, port), address
    finally:
        store.stop()
    assert all(p != port for _, p in listening())
