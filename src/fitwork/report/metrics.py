"""Prometheus metrics for a live run: a progress callback that also serves ``/metrics``."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import click

from fitwork.errors import FitworkError
from fitwork.telemetry.figures import busy_fraction

if TYPE_CHECKING:
    from types import ModuleType

    from prometheus_client import CollectorRegistry, Counter, Gauge

    from fitwork.telemetry.record import Progress

DEFAULT_HOST = "127.0.0.1"
EXTRA_HINT = "pip install 'fitwork[metrics]'"
_POLL_S = 0.05  # how soon the server notices `close` (socketserver's default is 0.5 s)

ProgressCallback = Callable[["Progress"], None]
F = TypeVar("F", bound=Callable[..., Any])

# snapshot attribute -> counter name (without the ``_total`` prometheus_client appends)
_RUN_COUNTERS = {
    "completed": ("fitwork_items_completed", "Source items finished (every path through)."),
    "fed": ("fitwork_items_fed", "Source items taken from the source and fed to the run."),
    "outputs": ("fitwork_outputs", "Outputs delivered to the caller."),
    "failures": ("fitwork_failures", "Items that went to the dead letters."),
}
# key in a ``units`` entry -> (counter name, extra label values)
_UNIT_COUNTERS = {
    "busy_s": ("busy", ()),
    "cpu_s": ("cpu", ()),
    "items_in": ("items", ("in",)),
    "items_out": ("items", ("out",)),
}


class MetricsError(FitworkError, RuntimeError):
    """Metrics cannot be served: the extra is not installed, or the address is taken."""


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per scrape; scrapes in flight never hold up the process's exit."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """Logs no request lines to stderr (they would garble the progress bar)."""

    def log_message(self, format: str, *args: Any) -> None:
        return None


def _serve(app: Any, host: str, port: int) -> tuple[WSGIServer, threading.Thread]:
    """Bind ``host:port`` (IPv4 or IPv6, as ``host`` resolves) and serve ``app`` in a thread."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                flags=socket.AI_PASSIVE)[0][0]
    server_class = type("_BoundServer", (_Server,), {"address_family": family})
    server: WSGIServer = make_server(host, port, app, server_class, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": _POLL_S},
                              name="fitwork-metrics", daemon=True)
    thread.start()
    return server, thread


def _prometheus() -> ModuleType:
    """The prometheus_client module, or an error that names the extra to install."""
    try:
        import prometheus_client
    except ImportError:
        raise MetricsError(
            f"Prometheus metrics need prometheus-client: install the extra with {EXTRA_HINT}"
        ) from None
    return prometheus_client


def _field(entry: Any, key: str) -> float:
    """``entry[key]`` for a mapping, ``entry.key`` otherwise; 0 when it is absent."""
    value = entry.get(key, 0) if isinstance(entry, Mapping) else getattr(entry, key, 0)
    return float(value or 0)


class MetricsExporter:
    """Serves a run's progress as Prometheus metrics; pass it as the run's ``progress``.

    Counters rise by the difference between successive snapshots, so they only go up; a
    snapshot whose ``elapsed_s`` is below the last one is taken as a new run, whose counts
    add to what is there.  A snapshot with a ``units`` mapping (unit name -> ``busy_s``,
    ``cpu_s``, ``replicas``, ``items_in``, ``items_out``) adds the per-unit metrics.
    The server binds ``host`` (loopback by default); port 0 takes any free port, and
    ``port`` holds the one bound.
    """

    def __init__(self, port: int = 0, host: str = DEFAULT_HOST) -> None:
        prometheus = _prometheus()
        self.host = host
        self.registry: CollectorRegistry = prometheus.CollectorRegistry()
        self._lock = threading.Lock()
        self._last: dict[tuple[str, ...], float] = {}
        self._elapsed = -1.0
        self._run_counters: dict[str, Counter] = {
            attr: prometheus.Counter(name, doc, registry=self.registry)
            for attr, (name, doc) in _RUN_COUNTERS.items()
        }
        gauge, counter = prometheus.Gauge, prometheus.Counter
        self._depth: Gauge = gauge("fitwork_queue_depth", "Items waiting in front of a unit.",
                                   ["unit"], registry=self.registry)
        self._throughput: Gauge = gauge(
            "fitwork_throughput_items_per_second",
            "Source items completed per second since the run started.", registry=self.registry)
        self._elapsed_gauge: Gauge = gauge("fitwork_elapsed_seconds",
                                           "Seconds since the run started.",
                                           registry=self.registry)
        self._unit_counters: dict[str, Counter] = {
            "busy": counter("fitwork_unit_busy_seconds",
                            "Seconds a unit's replicas spent working, summed.",
                            ["unit"], registry=self.registry),
            "cpu": counter("fitwork_unit_cpu_seconds",
                           "Process CPU seconds of a unit's replicas, summed.",
                           ["unit"], registry=self.registry),
            "items": counter("fitwork_unit_items", "Items into (in) and out of (out) a unit.",
                             ["unit", "direction"], registry=self.registry),
        }
        self._replicas: Gauge = gauge("fitwork_unit_replicas", "Replicas a unit runs.",
                                      ["unit"], registry=self.registry)
        self._utilization: Gauge = gauge(
            "fitwork_unit_utilization",
            "Share of a unit's replica time spent busy: busy s / (replicas x elapsed s).",
            ["unit"], registry=self.registry)
        try:
            server, thread = _serve(prometheus.make_wsgi_app(self.registry), host, port)
        except OSError as exc:
            raise MetricsError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; "
                "choose another --metrics-port, or 0 for any free port") from None
        self._server: WSGIServer | None = server
        self._thread: threading.Thread = thread
        self.port: int = server.server_address[1]

    @property
    def url(self) -> str:
        """Where Prometheus scrapes: ``http://HOST:PORT/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def __call__(self, snapshot: Progress) -> None:
        """Take one progress snapshot into the metrics."""
        with self._lock:
            if snapshot.elapsed_s < self._elapsed:
                self._last.clear()
            self._elapsed = snapshot.elapsed_s
            for attr, metric in self._run_counters.items():
                self._advance(metric, (attr,), float(getattr(snapshot, attr)))
            for name, depth in snapshot.depths.items():
                self._depth.labels(unit=name).set(depth)
            self._throughput.set(snapshot.rate)
            self._elapsed_gauge.set(snapshot.elapsed_s)
            units = getattr(snapshot, "units", None)
            if units:
                self._take_units(units, snapshot.elapsed_s)

    def _take_units(self, units: Mapping[str, Any], elapsed_s: float) -> None:
        """The per-unit metrics from a richer snapshot's ``units`` mapping."""
        for name, entry in units.items():
            for key, (metric, extra) in _UNIT_COUNTERS.items():
                child = self._unit_counters[metric].labels(name, *extra)
                self._advance(child, ("unit", name, key), _field(entry, key))
            replicas = _field(entry, "replicas")
            self._replicas.labels(unit=name).set(replicas)
            self._utilization.labels(unit=name).set(
                busy_fraction(_field(entry, "busy_s"), int(replicas), elapsed_s))

    def _advance(self, counter: Counter, key: tuple[str, ...], value: float) -> None:
        """Raise ``counter`` by how far ``value`` rose since the last snapshot (never lower)."""
        rise = value - self._last.get(key, 0.0)
        if rise > 0:
            counter.inc(rise)
        self._last[key] = value

    def close(self) -> None:
        """Stop serving; safe to call twice."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def exporter_for(port: int | None, host: str = DEFAULT_HOST) -> Iterator[MetricsExporter | None]:
    """A `MetricsExporter` serving on ``host:port`` for the block, or None when no port."""
    if port is None:
        yield None
        return
    with MetricsExporter(port, host) as exporter:
        yield exporter


def combine_progress(*callbacks: ProgressCallback | None) -> ProgressCallback | None:
    """One progress callback calling each given one in turn (None when none is given)."""
    present = [callback for callback in callbacks if callback is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]

    def each(snapshot: Progress) -> None:
        for callback in present:
            callback(snapshot)

    return each


def metrics_options(command: F) -> F:
    """Add ``--metrics-port`` and ``--metrics-host`` to a click command."""
    command = click.option(
        "--metrics-host", default=DEFAULT_HOST, show_default=True, metavar="HOST",
        help="Address the metrics server binds (0.0.0.0 exposes it to the network).")(command)
    return click.option(
        "--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
        help="Serve Prometheus metrics on this port while running (0: any free port; "
        f"needs {EXTRA_HINT}).")(command)
