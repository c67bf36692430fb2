"""A loopback object store for the demo: pages to read, recognised text to write, both slow.

::

    GET /docs/ID.png   -> the page's PNG          } each answered after ``latency_s``, the
    PUT /texts/ID      <- the page's lines (JSON) } first-byte latency of remote storage

The store runs in daemon threads of the process that starts it (the demo's driver), so
what workers write lands in ``texts`` there.  `serve` points ``STORE_ENV`` at it; worker
processes forked while it runs inherit the address, and `get_document` / `put_text` read it.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STORE_ENV = "FITWORK_DEMO_STORE"
TIMEOUT_S = 60.0
ATTEMPTS = 3
"""Tries per request: a client of remote storage retries a dropped connection."""
RETRY_WAIT_S = 0.05

_DOC = re.compile(r"^/docs/([A-Za-z0-9_-]{1,64})\.png$")
_TEXT = re.compile(r"^/texts/([A-Za-z0-9_-]{1,64})$")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


class DocumentStore:
    """Pages by id, served over HTTP on 127.0.0.1 with a fixed latency per request."""

    def __init__(self, documents: Mapping[str, bytes], latency_s: float = 0.0) -> None:
        if latency_s < 0:
            raise ValueError(f"latency {latency_s} s: must be >= 0")
        self.documents = dict(documents)
        self.latency_s = latency_s
        self.texts: dict[str, list[str]] = {}
        self.gets = 0
        self.puts = 0
        self.base_url = ""
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> DocumentStore:
        """Bind a free port on 127.0.0.1 and serve in a background thread."""
        store = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                match = _DOC.match(self.path)
                body = store.documents.get(match.group(1)) if match else None
                store.wait()
                if body is None:
                    self.send_error(404, f"no page at {self.path}; ask for /docs/ID.png")
                    return
                with store._lock:
                    store.gets += 1
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:
                match = _TEXT.match(self.path)
                length = int(self.headers.get("Content-Length", "0"))
                payload = self.rfile.read(length)
                store.wait()
                if match is None:
                    self.send_error(404, f"cannot write {self.path}; write /texts/ID")
                    return
                try:
                    lines = json.loads(payload)
                except ValueError:
                    self.send_error(400, "the body must be a JSON list of lines")
                    return
                with store._lock:
                    store.texts[match.group(1)] = list(lines)
                    store.puts += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = _Server(("127.0.0.1", 0), Handler)
        self._server = server
        self.base_url = f"http://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,),
                                        name="fitwork-demo-store", daemon=True)
        self._thread.start()
        return self

    def wait(self) -> None:
        """Hold a request for the store's latency."""
        if self.latency_s > 0:
            time.sleep(self.latency_s)

    def clear_texts(self) -> None:
        """Forget what was written (between runs)."""
        with self._lock:
            self.texts.clear()
            self.puts = 0

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None


@contextmanager
def serve(documents: Mapping[str, bytes], latency_ms: float) -> Iterator[DocumentStore]:
    """Run a store of ``documents`` and point ``STORE_ENV`` at it while the block runs."""
    store = DocumentStore(documents, latency_ms / 1000.0).start()
    previous = os.environ.get(STORE_ENV)
    os.environ[STORE_ENV] = store.base_url
    try:
        yield store
    finally:
        store.stop()
        if previous is None:
            os.environ.pop(STORE_ENV, None)
        else:
            os.environ[STORE_ENV] = previous


def _base_url() -> str:
    base = os.environ.get(STORE_ENV)
    if not base:
        raise RuntimeError(f"{STORE_ENV} is not set: start the store with "
                           "fitwork_demo.server.serve(...) before running the OCR units")
    return base


def _request(request: urllib.request.Request) -> bytes:
    """The response body, after up to ``ATTEMPTS`` tries on a dropped connection."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return bytes(response.read())
        except urllib.error.HTTPError:
            raise
        except (ConnectionError, urllib.error.URLError):
            if attempt == ATTEMPTS:
                raise
            time.sleep(RETRY_WAIT_S * attempt)
    raise AssertionError("unreachable")


def get_document(document_id: str) -> bytes:
    """The PNG of page ``document_id``, read from the store."""
    return _request(urllib.request.Request(f"{_base_url()}/docs/{document_id}.png"))


def put_text(document_id: str, lines: Sequence[str]) -> None:
    """Write the lines recognised on page ``document_id`` to the store."""
    _request(urllib.request.Request(
        f"{_base_url()}/texts/{document_id}", data=json.dumps(list(lines)).encode(),
        method="PUT", headers={"Content-Type": "application/json"}))
