"""Thumbnail features: fetch PNGs over HTTP, decode, batch-compute features, keep the textured."""

from __future__ import annotations

import functools
import io
import json
import math
import os
import random
import re
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from fitwork.workload import Pipeline, unit

IMAGE_SIZE = 256
THUMB_SIZE = 64
HISTOGRAM_BINS = 16
# Mean absolute luminance gradient (grey levels per pixel step) a thumbnail needs to be kept;
# with the generated images this drops roughly a fifth of 0000.png..0199.png.
EDGE_THRESHOLD = 6.0
BASE_URL_ENV = "THUMBS_BASE_URL"
LATENCY_ENV = "THUMBS_LATENCY_MS"
DEFAULT_LATENCY_MS = 20.0
IMAGES_ENV = "THUMBS_IMAGES"
DEFAULT_IMAGES = 200
INPUT = Path(__file__).with_suffix(".jsonl")

_IMAGE_PATH = re.compile(r"^/img/(\d{1,6})\.png$")


# --- the stand-in for remote object storage -------------------------------------------------


@functools.lru_cache(maxsize=4096)
def render_image(number: int) -> bytes:
    """The PNG for image ``number``: a seeded gradient, and for most numbers a texture on top.

    About one image in five is plain (the gradient and at most one large soft shape), so its
    thumbnail has little edge energy; the rest get seeded stripes, shapes and a label.  That
    split is what ``keep_textured`` filters on.
    """
    rng = random.Random(number)
    size = IMAGE_SIZE
    axis = np.linspace(0.0, 1.0, size, dtype=np.float32)
    xs, ys = axis[None, :], axis[:, None]
    start = np.array([rng.randrange(256) for _ in range(3)], dtype=np.float32)
    end = np.array([rng.randrange(256) for _ in range(3)], dtype=np.float32)
    angle = rng.uniform(0.0, math.pi / 2)
    ramp = (math.cos(angle) * xs + math.sin(angle) * ys) / (math.cos(angle) + math.sin(angle))
    pixels = start + (end - start) * ramp[..., None]

    plain = rng.random() < 0.2
    if not plain:
        period = rng.uniform(6.0, 24.0)
        theta = rng.uniform(0.0, math.pi)
        phase = (math.cos(theta) * xs + math.sin(theta) * ys) * (2 * math.pi * (size - 1) / period)
        amplitude = rng.uniform(25.0, 70.0)
        tint = np.array([rng.uniform(0.5, 1.0) for _ in range(3)], dtype=np.float32)
        pixels = pixels + amplitude * np.sin(phase)[..., None] * tint
    image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8), "RGB")

    draw = ImageDraw.Draw(image)
    for _ in range(rng.randrange(0, 2) if plain else rng.randrange(2, 9)):
        x0, y0 = rng.randrange(size - 32), rng.randrange(size - 32)
        x1 = min(size - 1, x0 + rng.randrange(32, size // 2))
        y1 = min(size - 1, y0 + rng.randrange(32, size // 2))
        colour = tuple(rng.randrange(256) for _ in range(3))
        if plain:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
            continue
        outline = tuple(rng.randrange(256) for _ in range(3))
        match rng.randrange(3):
            case 0:
                draw.rectangle((x0, y0, x1, y1), fill=colour, outline=outline, width=3)
            case 1:
                draw.ellipse((x0, y0, x1, y1), fill=colour, outline=outline, width=3)
            case _:
                draw.line((x0, y0, x1, y1), fill=colour, width=rng.randrange(2, 9))
    if not plain:
        draw.text((8, 8), f"{number:04d}", fill=(255, 255, 255))

    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


class _Server(ThreadingHTTPServer):
    # The default backlog of 5 drops connection attempts once a few dozen fetches are in
    # flight, and each dropped one waits a second for its retry: the stand-in store then
    # limits every layout, not the layout under test.
    request_queue_size = 256
    daemon_threads = True


class ImageServer:
    """A loopback HTTP server for ``/img/NNNN.png``, running in a daemon thread."""

    def __init__(self) -> None:
        self.base_url = ""
        self.requests = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ImageServer:
        """Bind 127.0.0.1 on a free port and serve in the background."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                match = _IMAGE_PATH.match(self.path)
                if match is None:
                    self.send_error(404, f"no image at {self.path}; ask for /img/NNNN.png")
                    return
                latency_ms = float(os.environ.get(LATENCY_ENV, DEFAULT_LATENCY_MS))
                if latency_ms > 0:
                    time.sleep(latency_ms / 1000.0)
                body = render_image(int(match.group(1)))
                with owner._lock:
                    owner.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = _Server(("127.0.0.1", 0), Handler)
        self._server = server
        self.base_url = f"http://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="thumbnails-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None


@contextmanager
def serve_images() -> Iterator[ImageServer]:
    """Run the image server and point ``THUMBS_BASE_URL`` at it for the run (and its workers)."""
    for number in range(int(os.environ.get(IMAGES_ENV, DEFAULT_IMAGES))):
        render_image(number)  # render up front, as a store that already holds them would
    server = ImageServer().start()
    previous = os.environ.get(BASE_URL_ENV)
    os.environ[BASE_URL_ENV] = server.base_url
    try:
        yield server
    finally:
        server.stop()
        if previous is None:
            os.environ.pop(BASE_URL_ENV, None)
        else:
            os.environ[BASE_URL_ENV] = previous


# --- the units ------------------------------------------------------------------------------


@unit(io=8, cpu=0.1)
def fetch(item: dict[str, Any]) -> dict[str, Any]:
    """Download ``THUMBS_BASE_URL/img/<name>``."""
    base_url = os.environ.get(BASE_URL_ENV)
    if not base_url:
        raise RuntimeError(
            f"{BASE_URL_ENV} is not set; run inside `with pipeline.run_context():` "
            "so the image server is up"
        )
    name = item["name"]
    with urllib.request.urlopen(f"{base_url}/img/{name}", timeout=30) as response:
        png = response.read()
    return {"name": name, "png": png}


@unit(cpu=1)
def decode(item: dict[str, Any]) -> dict[str, Any]:
    """Decode the PNG and shrink it to a ``THUMB_SIZE`` square RGB thumbnail."""
    with Image.open(io.BytesIO(item["png"])) as image:
        thumb = image.convert("RGB").resize((THUMB_SIZE, THUMB_SIZE), Image.Resampling.BILINEAR)
    return {"name": item["name"], "pixels": np.asarray(thumb, dtype=np.uint8)}


def _luminance(pixels: np.ndarray) -> np.ndarray:
    return pixels.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


@unit(cpu=0.5, batch_size=16)
def features(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean colour, a luminance histogram and edge energy for each thumbnail in the batch."""
    stack = np.stack([item["pixels"] for item in batch]).astype(np.float64)  # N,H,W,3
    mean_rgb = stack.mean(axis=(1, 2))
    luma = _luminance(stack)  # N,H,W
    bins = np.minimum((luma / 256.0 * HISTOGRAM_BINS).astype(np.int64), HISTOGRAM_BINS - 1)
    offsets = np.arange(len(batch))[:, None] * HISTOGRAM_BINS
    histograms = np.bincount(
        (bins.reshape(len(batch), -1) + offsets).ravel(), minlength=len(batch) * HISTOGRAM_BINS
    ).reshape(len(batch), HISTOGRAM_BINS)
    dx = np.abs(np.diff(luma, axis=2)).mean(axis=(1, 2))
    dy = np.abs(np.diff(luma, axis=1)).mean(axis=(1, 2))
    edge_energy = dx + dy
    return [
        {
            "name": item["name"],
            "mean_rgb": [round(float(v), 3) for v in mean_rgb[i]],
            "histogram": [int(v) for v in histograms[i]],
            "edge_energy": round(float(edge_energy[i]), 4),
        }
        for i, item in enumerate(batch)
    ]


@unit(kind="filter", cpu=0.1)
def keep_textured(item: dict[str, Any]) -> bool:
    """Keep thumbnails with at least ``EDGE_THRESHOLD`` of edge energy."""
    return bool(item["edge_energy"] >= EDGE_THRESHOLD)


pipeline = Pipeline(fetch, decode, features, keep_textured, name="thumbnails", context=serve_images)


def read_items(path: Path = INPUT) -> list[dict[str, Any]]:
    """The input items, one JSON object a line."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


if __name__ == "__main__":
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else None
    items = read_items()[:limit]
    with pipeline.run_context():
        kept = list(pipeline.serial(items))
    print(f"{pipeline.name}: kept {len(kept)} of {len(items)} images")
