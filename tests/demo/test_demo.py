"""The OCR demo: its pieces on their own, then a reduced demo end to end (API and CLI)."""

from __future__ import annotations

import ast
import json
import os
import re
import statistics
import subprocess
import sys
from html import unescape
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("rapidocr_onnxruntime")
pytest.importorskip("PIL")

from fitwork.profiling.onnx import node_flops, profile_flops
from fitwork.telemetry.record import DeviceSample, RunRecord
from fitwork_demo import ACCURACY_THRESHOLD, DemoConfig, DemoResult, run_demo
from fitwork_demo.config import AIM_MONOLITH
from fitwork_demo.documents import Document, make_documents, page_text, score
from fitwork_demo.flops import spread
from fitwork_demo.gpu import mean_busy, onnxruntime_gpu_installed, peak_memory
from fitwork_demo.layouts import THREADED, Detect, Flops, Recognise, split, threaded
from fitwork_demo.ocr import layout_lines, recognition_input
from fitwork_demo.run import process_counts
from fitwork_demo.server import get_document, put_text, serve
from fitwork_demo.sweep import MemoryWatch, working_rate

PAGES = 6
LATENCIES = (5.0, 20.0)
DEMO = Path(__file__).resolve().parents[2] / "src" / "fitwork_demo"


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


def test_the_monolith_sweep_spans_one_to_k_processes_and_the_plans_count() -> None:
    def plan(replicas: int) -> SimpleNamespace:
        return SimpleNamespace(monolithic=SimpleNamespace(result=SimpleNamespace(
            replicas=[SimpleNamespace(replicas=replicas)])))

    assert process_counts(plan(5), DemoConfig(), cores=2) == [1, 2, 4, 5, 8]
    assert process_counts(plan(9), DemoConfig(), cores=2) == [1, 2, 4, 8, 9]
    assert process_counts(plan(9), DemoConfig(max_processes=2), cores=2) == [1, 2]
    assert process_counts(plan(3), DemoConfig(max_processes=3), cores=2) == [1, 2, 3]


def test_hand_layouts_parse_from_the_command_line() -> None:
    import click

    from fitwork_demo.cli import _hand

    assert _hand(("1x2", "2X3b1")) == ((1, 2, None), (2, 3, 1))
    with pytest.raises(click.BadParameter, match="DETECTxRECOGNISE"):
        _hand(("1y2",))


def test_the_rate_leaves_out_the_startup_but_not_the_fill() -> None:
    workers = [SimpleNamespace(busy_intervals=[(3.0, 4.5)]),
               SimpleNamespace(busy_intervals=[(2.0, 6.0)]), SimpleNamespace(busy_intervals=[])]
    record = SimpleNamespace(throughput=1.0, items_completed=12, workers=workers,
                             completions=SimpleNamespace(times_s=[5.5, 6.0],
                                                         completed=[10, 12]))
    assert working_rate(record) == pytest.approx(12 / 4.0)  # type: ignore[arg-type]
    idle = SimpleNamespace(throughput=1.0, items_completed=0, workers=[],
                           completions=SimpleNamespace(times_s=[], completed=[]))
    assert working_rate(idle) == 1.0  # type: ignore[arg-type]


def test_memory_watch_sums_the_processes_it_is_given() -> None:
    with MemoryWatch(lambda: [os.getpid()], interval=0.01) as watch:
        watch.sample()
    assert watch.samples >= 1 and watch.peak_rss > 2**20
    if Path(f"/proc/{os.getpid()}/smaps_rollup").exists():
        assert watch.peak_pss is not None and 0 < watch.peak_pss <= watch.peak_rss * 1.01
    gone = MemoryWatch(lambda: [2**22 + 7])
    gone.sample()
    assert gone.peak_rss == 0


def test_device_sample_figures() -> None:
    samples = [DeviceSample(t_s=0.1 * i, device=0, name="NVIDIA H100", utilization=u,
                            memory_used=m, memory_total=2**34)
               for i, (u, m) in enumerate([(0.5, 2**30), (1.0, 2**31)])]
    assert mean_busy(samples) == pytest.approx(0.75)
    assert peak_memory(samples) == 2**31
    assert mean_busy([]) is None and peak_memory([]) is None


def test_split_units_each_load_only_their_model_and_read_the_page() -> None:
    page = make_documents(1, seed=5)[0]
    detect, recognise = Detect(), Recognise()
    assert detect.models.rec_session is None and detect.models.detector is not None
    assert recognise.models.detector is None and recognise.models.rec_session is not None
    (out,) = recognise([detect({"id": page.id, "png": page.png})])
    assert out == {"id": page.id, "lines": list(page.lines)}


def test_the_threaded_monolith_is_the_monolith_fused_with_threads() -> None:
    pipeline = threaded(Flops(), io=3)
    (fused,) = pipeline.units
    assert fused.name == THREADED and fused.io == 3 and fused.resources.cpu == 1.0
    assert [u.name for u in split(Flops()).units] == ["fetch", "detect", "recognise", "store"]


def test_the_demo_uses_only_the_public_api() -> None:
    """No engine internals, and no private names, imported anywhere in the demo."""
    found = []
    for path in sorted(DEMO.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.startswith("fitwork.engine"):
                    found.append(f"{path.name}: from {node.module}")
                found += [f"{path.name}: {a.name} from {node.module}" for a in node.names
                          if node.module.startswith("fitwork") and a.name.startswith("_")]
            elif isinstance(node, ast.Import):
                found += [f"{path.name}: import {a.name}" for a in node.names
                          if a.name.startswith("fitwork.engine")]
    assert found == []
    assert "accel_s" not in (DEMO / "run.py").read_text()  # no relabelled profiles


def test_models_use_cuda_where_onnxruntime_gpu_sees_a_gpu() -> None:
    if not onnxruntime_gpu_installed():
        pytest.skip("onnxruntime-gpu is not installed")
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("onnxruntime sees no CUDA device")
    from fitwork_demo.ocr import Models, read_page

    models = Models(gpu=True)
    assert models.providers[0] == "CUDAExecutionProvider"
    page = make_documents(1)[0]
    boxes, crops = read_page(models, page.png)
    assert layout_lines(boxes, models.recognise(crops)) == list(page.lines)


@pytest.mark.slow
def test_decompose_cuts_the_monolith_at_the_store_calls() -> None:
    from fitwork.decomposition import decompose
    from fitwork_demo.ocr import ocr_document

    pages = make_documents(3)
    with serve({d.id: d.png for d in pages}, latency_ms=20):
        made = decompose(ocr_document, sample=[{"id": d.id} for d in pages])
    assert [u.is_io for u in made.units] == [True, False, True]
    assert made.units[1].resources.cpu == 1.0


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    out = tmp_path_factory.mktemp("demo")
    return run_demo(DemoConfig(images=PAGES, latencies_ms=LATENCIES, repeats=2,
                               max_processes=2, io_threads=(2,), hand=((1, 1, None),),
                               samples=3, out=out))


@pytest.mark.slow
def test_demo_reads_the_same_text_in_every_trial(result: DemoResult) -> None:
    assert result.failures == []
    assert result.same_text and result.ok
    pages = {d.id: list(d.lines) for d in result.documents}
    for trial in result.trials:
        assert trial.record.items_completed == PAGES and trial.record.failures == 0
        assert trial.stored and not trial.capped
        assert result.score(trial).line_accuracy >= ACCURACY_THRESHOLD
        assert trial.outputs == result.trials[0].outputs
    exact = sum(pages[k] == v for k, v in result.trials[0].outputs.items())
    assert exact >= ACCURACY_THRESHOLD * PAGES


@pytest.mark.slow
def test_the_sweep_ran_every_layout_twice_in_alternating_order(result: DemoResult) -> None:
    assert [s.latency_ms for s in result.sweeps] == list(LATENCIES)
    # the model units are profiled once; fetch and store again at each store latency
    first, second = ({u.name: u for u in s.profile.units} for s in result.sweeps)
    assert first["detect"] == second["detect"] and first["recognise"] == second["recognise"]
    assert second["fetch"].wall_s > first["fetch"].wall_s  # 20 ms a request against 5
    assert second["store"].wall_s > first["store"].wall_s
    for sweep in result.sweeps:
        keys = [c.layout.key for c in sweep.contenders]
        assert {"monolith-p1", "monolith-p2", "threaded-2x2", "hand-d1-r1", "fitted",
                "fitted-adapt"} <= set(keys)
        assert all(len(c.trials) == 2 for c in sweep.contenders)
        mine = [t for t in result.trials if t.latency_ms == sweep.latency_ms]
        first = [t.layout for t in mine if t.repeat == 0]
        second = [t.layout for t in mine if t.repeat == 1]
        assert first == keys and second == keys[::-1]
        best = max(sweep.family("monolith"), key=lambda c: c.rate)
        assert sweep.best_monolith is best
        assert sweep.over_monolith == pytest.approx(sweep.fitted.rate / best.rate)
        assert sweep.fitted.rate == statistics.median(t.rate for t in sweep.fitted.trials)
        # plan quality and live re-fitting are separate contenders: one plan, run twice
        fitted, adapted = sweep.fitted, sweep.adapted
        assert adapted is not None
        assert not fitted.layout.adapt and adapted.layout.adapt
        assert fitted.layout.placement is adapted.layout.placement is sweep.plan
        assert fitted.layout.predicted == sweep.plan.fitted.throughput
        assert all(not t.record.refits for t in fitted.trials)
        for trial in [*fitted.trials, *adapted.trials]:
            assert trial.record.placement is not None
            assert trial.record.placement["source"] == "plan"
            assert trial.peak_rss > 0
        assert best.peak_rss > 0 and sweep.memory_ratio is not None


@pytest.mark.slow
def test_demo_writes_records_summary_and_reports(result: DemoResult) -> None:
    out = result.config.out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["same_text"] is True and summary["pages_per_trial"] == PAGES
    assert summary["trials"] == len(result.trials)
    for sweep, entry in zip(result.sweeps, summary["latencies"], strict=True):
        tag = f"{sweep.latency_ms:g}ms"
        assert entry["latency_ms"] == sweep.latency_ms
        assert entry["best_monolith"]["key"] == sweep.best_monolith.layout.key
        assert entry["fitted_over_best_monolith"] == pytest.approx(sweep.over_monolith)
        verdict = entry["verdict"]
        assert entry["aims_met"]["over_monolith"] == (
            verdict["outcome"] == "win" and sweep.over_monolith >= AIM_MONOLITH)
        assert entry["fitted"]["peak_rss"] > 0
        assert len(entry["contenders"]) == len(sweep.contenders)
        for contender in sweep.contenders:
            for repeat in (1, 2):
                path = out / "records" / tag / f"{contender.layout.key}.{repeat}.record.json"
                assert RunRecord.load(path).items_completed == PAGES
        assert (out / f"plan-{tag}.json").is_file() and (out / f"profile-{tag}.json").is_file()
        page = (out / f"report-{tag}.html").read_text()
        assert 'id="utilization"' in page and "best monolith" in page
        assert "same outputs" in page
    index = unescape((out / "report.html").read_text())  # every latency, not the last one
    for sweep, entry in zip(result.sweeps, summary["latencies"], strict=True):
        assert entry["verdict"]["text"] in index
        assert f'href="report-{sweep.latency_ms:g}ms.html"' in index
    texts = [json.loads(line) for line in (out / "texts.jsonl").read_text().splitlines()]
    assert len(texts) == PAGES and all(t["read"] is not None for t in texts)


def _console(result: DemoResult) -> str:
    from rich.console import Console

    from fitwork_demo.render import render

    console = Console(width=160, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(result), soft_wrap=True)
    return console.export_text()


def _html_verdict(page: str) -> str:
    """The report's headline as text: its strong lead and its details."""
    found = re.search(r'<section id="headline"><p class="verdict (\w+)"><strong>(.*?)</strong>'
                      r'<span class="details">(.*?)</span>', page)
    assert found is not None
    return found.group(1) + " | " + unescape(found.group(2) + found.group(3))


@pytest.mark.slow
def test_console_summary_and_html_state_one_verdict(result: DemoResult) -> None:
    """The console, summary.json and the HTML report: the same statistic, winner, ratio."""
    out = result.config.out
    summary = json.loads((out / "summary.json").read_text())
    console = _console(result)
    for sweep, entry in zip(result.sweeps, summary["latencies"], strict=True):
        page = (out / f"report-{sweep.latency_ms:g}ms.html").read_text()
        html = _html_verdict(page)
        comparisons = [entry["verdict"], entry["adapted_verdict"], entry["hand_verdict"]]
        for verdict in comparisons:
            text = verdict["text"]
            assert text in console and text in html
            assert verdict["statistic"].startswith("median of 2 trials")
            assert verdict["value"] == pytest.approx(statistics.median(verdict["trials"]))
            assert verdict["ratio"] == pytest.approx(verdict["value"] / verdict["base_value"])
            low, high = verdict["range"]
            base_low, base_high = verdict["base_range"]
            overlap = low <= base_high and base_low <= high
            paired = verdict["paired_p"] is not None and verdict["paired_p"] < 0.05
            assert (verdict["outcome"] == "too noisy to call") == (overlap and not paired)
            assert (("TOO NOISY TO CALL" in text) == (overlap and not paired) and
                    ("WINS" in text) == (verdict["outcome"] == "win"))
        main = entry["verdict"]
        assert main["name"] == "fitted" and main["base"].startswith("best monolith")
        assert main["value"] == pytest.approx(sweep.fitted.rate)
        assert main["base_value"] == pytest.approx(sweep.best_monolith.rate)
        tone = {"win": "win", "loss": "lose", "too noisy to call": "doubt"}[main["outcome"]]
        assert html.startswith(f"{tone} | {sweep.latency_ms:g} ms: {main['text']}")
        assert entry["adapted_verdict"]["name"] == "fitted + adapt"


def _demo_command() -> list[str]:
    return [sys.executable, "-m", "fitwork.cli", "demo"]


@pytest.mark.slow
def test_cli_runs_the_demo(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    done = subprocess.run(
        [*_demo_command(), "--images", "2", "--latency-ms", "5", "--repeats", "1",
         "--max-processes", "1", "--io-threads", "1", "--hand", "1x1", "--samples", "1",
         "--out", str(out), "--seed", "3", "--quiet"],
        capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "same text in every trial on every page: yes" in done.stdout
    assert "vs best monolith (" in done.stdout
    # one trial a side: no spread, so the verdict says it is not a stable one
    summary = json.loads((out / "summary.json").read_text())
    verdict = summary["latencies"][0]["verdict"]
    assert verdict["outcome"] == "too noisy to call" and "not a stable verdict" in verdict["text"]
    assert verdict["text"] in done.stdout
    assert verdict["text"] in unescape((out / "report.html").read_text())
    assert (out / "report.html").is_file() and (out / "summary.json").is_file()
    assert (out / "records" / "5ms" / "fitted.1.record.json").is_file()
