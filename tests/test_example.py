"""The thumbnails example: its server, its units and its pipeline, run serially."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from PIL import Image

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "thumbnails.py"
MODULE_NAME = "fitwork_example_thumbnails"


@pytest.fixture(scope="module")
def thumbs() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location(MODULE_NAME, EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(MODULE_NAME, None)


@pytest.fixture(autouse=True)
def fast_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THUMBS_LATENCY_MS", "1")
    monkeypatch.delenv("THUMBS_BASE_URL", raising=False)


def test_input_file_lists_200_images(thumbs: ModuleType) -> None:
    items = thumbs.read_items()
    assert items == [{"name": f"{i:04d}.png"} for i in range(200)]


def test_pipeline_shape(thumbs: ModuleType) -> None:
    pipeline = thumbs.pipeline
    assert pipeline.name == "thumbnails"
    assert [u.name for u in pipeline.units] == ["fetch", "decode", "features", "keep_textured"]
    fetch, decode, features, keep = pipeline.units
    assert fetch.is_io and fetch.io == 8
    assert not decode.is_io and decode.resources.cpu == 1
    assert features.batch_size == 16
    assert keep.kind == "filter"


def test_server_serves_deterministic_pngs(thumbs: ModuleType) -> None:
    with thumbs.pipeline.run_context() as server:
        base_url = os.environ["THUMBS_BASE_URL"]
        assert base_url == server.base_url
        assert base_url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{base_url}/img/0042.png", timeout=10) as response:
            assert response.headers["Content-Type"] == "image/png"
            first = response.read()
        with urllib.request.urlopen(f"{base_url}/img/0042.png", timeout=10) as response:
            second = response.read()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base_url}/nothing-here", timeout=10)
        missing.value.close()
        assert server.requests == 2
    assert "THUMBS_BASE_URL" not in os.environ
    assert first == second
    assert first != thumbs.render_image(43)
    with Image.open(io.BytesIO(first)) as image:
        assert image.format == "PNG"
        assert image.size == (thumbs.IMAGE_SIZE, thumbs.IMAGE_SIZE)


def test_context_restores_a_previous_base_url(
    thumbs: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THUMBS_BASE_URL", "http://elsewhere.invalid")
    with thumbs.pipeline.run_context() as server:
        assert os.environ["THUMBS_BASE_URL"] == server.base_url
    assert os.environ["THUMBS_BASE_URL"] == "http://elsewhere.invalid"


def test_fetch_without_server_says_what_to_do(thumbs: ModuleType) -> None:
    with pytest.raises(RuntimeError, match="run_context"):
        thumbs.fetch({"name": "0000.png"})


def test_serial_run_fetches_decodes_measures_and_filters(thumbs: ModuleType) -> None:
    items = thumbs.read_items()[:30]
    with thumbs.pipeline.run_context() as server:
        outputs = list(thumbs.pipeline.serial(items))
        requests = server.requests
    assert requests == len(items)

    names = [item["name"] for item in items]
    kept = [out["name"] for out in outputs]
    assert 0 < len(kept) < len(items), "the filter should drop some images but not all"
    assert kept == [n for n in names if n in set(kept)], "serial keeps input order"

    pixel_count = thumbs.THUMB_SIZE * thumbs.THUMB_SIZE
    for out in outputs:
        assert set(out) == {"name", "mean_rgb", "histogram", "edge_energy"}
        assert json.loads(json.dumps(out)) == out, "outputs are plain JSON values"
        assert len(out["mean_rgb"]) == 3
        assert all(type(v) is float and 0.0 <= v <= 255.0 for v in out["mean_rgb"])
        assert len(out["histogram"]) == thumbs.HISTOGRAM_BINS
        assert all(type(v) is int and v >= 0 for v in out["histogram"])
        assert sum(out["histogram"]) == pixel_count
        assert type(out["edge_energy"]) is float
        assert out["edge_energy"] >= thumbs.EDGE_THRESHOLD


def test_batched_features_match_one_at_a_time(thumbs: ModuleType) -> None:
    decoded = [
        thumbs.decode({"name": f"{i:04d}.png", "png": thumbs.render_image(i)}) for i in range(5)
    ]
    for item in decoded:
        assert item["pixels"].shape == (thumbs.THUMB_SIZE, thumbs.THUMB_SIZE, 3)
        assert item["pixels"].dtype.name == "uint8"
    batched = thumbs.features(decoded)
    single = [thumbs.features([item])[0] for item in decoded]
    assert batched == single
    assert [out["name"] for out in batched] == [item["name"] for item in decoded]


@pytest.mark.slow
def test_filter_drops_a_minority_of_the_inputs(thumbs: ModuleType) -> None:
    decoded = [
        thumbs.decode({"name": item["name"], "png": thumbs.render_image(int(item["name"][:4]))})
        for item in thumbs.read_items()
    ]
    measured = thumbs.features(decoded)
    dropped = sum(not thumbs.keep_textured(out) for out in measured)
    assert 0.10 * len(measured) <= dropped <= 0.30 * len(measured)
