"""The OCR demo: its pieces on their own, then a reduced demo end to end (API and CLI)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rapidocr_onnxruntime")
pytest.importorskip("PIL")

from fitwork.demo import ACCURACY_THRESHOLD, DemoConfig, DemoResult, run_demo
from fitwork.demo.documents import Document, make_documents, page_text, score
from fitwork.demo.flops import spread
from fitwork.demo.gpu import NvmlSampler, onnxruntime_gpu_installed
from fitwork.demo.layouts import Flops, joint, split
from fitwork.demo.ocr import layout_lines, recognition_input
from fitwork.demo.run import fits_once
from fitwork.demo.server import get_document, put_text, serve
from fitwork.hardware.fleet import Fleet, NodeType
from fitwork.profiling.onnx import node_flops, profile_flops
from fitwork.telemetry.record import RunRecord

PAGES = 12


def _box(left: float, top: float, right: float, bottom: float) -> np.ndarray:
    return np.array([[left, top], [right, top], [right, bottom], [left, bottom]],
                    dtype=np.float32)


def test_pages_are_deterministic_pngs_with_known_text() -> None:
    first, again = make_documents(3, seed=7), make_documents(3, seed=7)
    assert first == again
    assert [d.id for d in first] == ["doc-00000", "doc-00001", "doc-00002"]
    assert all(d.png.startswith(b"\x89PNG") for d in first)
    assert all(3 <= len(d.lines) <= 4 for d in first)
    assert page_text(0, 7) != page_text(0, 8)


def test_score_counts_exact_lines_in_place() -> None:
    known = [Document("a", ("one 12", "two"), b""), Document("b", ("three",), b"")]
    result = score(known, {"a": ["one 12", "tw0"], "b": ["three"]})
    assert (result.lines, result.lines_exact) == (3, 2)
    assert (result.documents, result.documents_exact) == (2, 1)
    assert result.line_accuracy == pytest.approx(2 / 3)
    assert score(known, {}).line_accuracy == 0.0


def test_layout_joins_words_of_a_line_and_drops_unsure_boxes() -> None:
    boxes = [_box(10, 10, 60, 30), _box(80, 12, 120, 31), _box(10, 50, 40, 70),
             _box(50, 50, 90, 70)]
    results = [("total", 0.99), ("42", 0.95), ("due", 0.9), ("noise", 0.2)]
    assert layout_lines(boxes, results) == ["total 42", "due"]
    unordered = [boxes[1], boxes[0]]
    assert layout_lines(unordered, [("42", 0.9), ("total", 0.9)]) == ["total 42"]


def test_recognition_input_depends_on_the_crop_alone() -> None:
    crop = np.full((24, 100, 3), 255, dtype=np.uint8)
    tensor = recognition_input(crop)
    assert tensor.shape == (3, 48, 224) and tensor.dtype == np.float32
    assert tensor[:, :, :200].min() == pytest.approx(1.0)
    assert not tensor[:, :, 200:].any()
    assert recognition_input(np.zeros((40, 10, 3), np.uint8)).shape[-1] == 64


def test_node_flops_formulas() -> None:
    assert node_flops("Conv", [[1, 3, 8, 8], [16, 3, 3, 3]], [[1, 16, 8, 8]]) == \
        2 * 16 * 8 * 8 * 27
    assert node_flops("MatMul", [[2, 5, 7], [7, 4]], [[2, 5, 4]]) == 2 * 40 * 7
    assert node_flops("Gemm", [[5, 7], [7, 4]], [[5, 4]]) == 2 * 20 * 7
    assert node_flops("ConvTranspose", [[1, 4, 8, 8], [4, 2, 2, 2]], [[1, 2, 16, 16]]) == \
        2 * 256 * 8
    assert node_flops("ConvTranspose", [[1, 4, 8, 8]], [[1, 2, 16, 16]]) == 2 * 256 * 2 * 4
    assert node_flops("Relu", [[1, 4]], [[1, 4]]) == 0.0
    events = [{"cat": "Node", "name": "c_kernel_time",
               "args": {"op_name": "MatMul", "input_type_shape": [{"float": [3, 2]},
                                                                  {"float": [2, 5]}],
                        "output_type_shape": [{"float": [3, 5]}]}},
              {"cat": "Session", "name": "model_run", "args": {}}]
    assert profile_flops(events) == 2 * 15 * 2
    assert spread([b"a", b"b", b"c", b"d"], 2) == [b"a", b"c"]
    assert spread([b"a"], 6) == [b"a"]


def test_store_serves_pages_and_keeps_texts() -> None:
    pages = make_documents(2)
    with serve({d.id: d.png for d in pages}, latency_ms=1) as store:
        assert get_document(pages[1].id) == pages[1].png
        put_text(pages[0].id, ["a b", "c"])
        assert store.texts == {pages[0].id: ["a b", "c"]}
        assert (store.gets, store.puts) == (1, 1)
        with pytest.raises(Exception, match="404"):
            get_document("doc-99999")


def test_split_layout_does_not_fit_two_cores_but_joint_does() -> None:
    small = Fleet(name="two", node_types=[NodeType(name="vm", cores=2, memory=2**33)])
    assert "2.2 cores" in (fits_once(split(Flops()), small) or "")
    assert fits_once(joint(Flops()), small) is None


def test_nvml_sampler_is_harmless_without_nvml() -> None:
    with NvmlSampler(interval_s=0.01) as sampler:
        pass
    if importlib.util.find_spec("pynvml") is None:
        assert sampler.result.samples == [] and "NVML" in sampler.result.note
        assert sampler.result.mean_busy is None


def test_models_use_cuda_where_onnxruntime_gpu_sees_a_gpu() -> None:
    if not onnxruntime_gpu_installed():
        pytest.skip("onnxruntime-gpu is not installed")
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("onnxruntime sees no CUDA device")
    from fitwork.demo.ocr import Models, read_page

    models = Models(gpu=True)
    assert models.providers[0] == "CUDAExecutionProvider"
    page = make_documents(1)[0]
    boxes, crops = read_page(models, page.png)
    assert layout_lines(boxes, models.recognise(crops)) == list(page.lines)


@pytest.mark.slow
def test_decompose_cuts_the_monolith_where_the_joint_layout_does() -> None:
    from fitwork.decomposition import decompose
    from fitwork.demo.ocr import ocr_document

    pages = make_documents(3)
    with serve({d.id: d.png for d in pages}, latency_ms=20):
        made = decompose(ocr_document, sample=[{"id": d.id} for d in pages])
    explicit = joint(Flops())
    assert [u.is_io for u in made.units] == [u.is_io for u in explicit.units] \
        == [True, False, True]
    assert made.units[1].resources.cpu == explicit.units[1].resources.cpu == 1.0


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    out = tmp_path_factory.mktemp("demo")
    return run_demo(DemoConfig(images=PAGES, latency_ms=5, out=out, samples=4))


@pytest.mark.slow
def test_demo_reads_the_same_text_both_ways(result: DemoResult) -> None:
    assert result.failures == []
    assert result.same_text
    assert result.monolithic.outputs == result.fitted.outputs
    assert len(result.fitted.outputs) == PAGES
    for side in (result.monolithic, result.fitted):
        assert side.score.line_accuracy >= ACCURACY_THRESHOLD
        assert side.stored
        assert side.record.items_completed == PAGES and side.record.failures == 0


@pytest.mark.slow
def test_demo_figures(result: DemoResult) -> None:
    assert result.flops.detect and result.flops.recognise
    assert result.plan.workers_for() == result.fitted.replicas
    for side in (result.monolithic, result.fitted):
        cpu = side.figures.of(result.busiest_class)
        assert 0 < cpu.utilization <= 1.05
        assert cpu.mfu is not None and cpu.mfu > 0
        assert side.figures.capacity_utilization is not None
        assert side.cost_per_million is not None and side.cost_per_million > 0
        assert side.predicted > 0


@pytest.mark.slow
def test_demo_writes_records_and_report(result: DemoResult) -> None:
    out = result.config.out
    for name in ("monolithic", "fitted"):
        record = RunRecord.load(out / f"{name}.record.json")
        assert record.items_completed == PAGES
    page = (out / "report.html").read_text()
    assert 'id="utilization"' in page and 'id="cost"' in page
    summary = json.loads((out / "summary.json").read_text())
    assert summary["same_text"] is True and summary["pages"] == PAGES
    texts = [json.loads(line) for line in (out / "texts.jsonl").read_text().splitlines()]
    assert len(texts) == PAGES and all(t["fitted"] == t["monolithic"] for t in texts)


def _demo_command() -> list[str]:
    from fitwork.cli import main

    if "demo" in getattr(main, "commands", {}):
        return [sys.executable, "-m", "fitwork.cli", "demo"]
    return [sys.executable, "-m", "fitwork.demo.cli"]


@pytest.mark.slow
def test_cli_runs_the_demo(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    done = subprocess.run(
        [*_demo_command(), "--images", str(PAGES), "--latency-ms", "5", "--out", str(out),
         "--seed", "3", "--quiet"],
        capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "same text both ways on every page: yes" in done.stdout
    assert (out / "report.html").is_file()
    assert (out / "fitted.record.json").is_file() and (out / "monolithic.record.json").is_file()
