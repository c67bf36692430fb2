"""What the report says up front and what it plots, on records with chosen figures."""

from __future__ import annotations

import re
import shutil
from html import escape
from pathlib import Path

import pytest

from fitwork import Pipeline, unit
from fitwork.fit.plan import Plan, PlanSide, plan_for
from fitwork.hardware.discover import discover_local
from fitwork.profiling import profile_pipeline
from fitwork.report.html import correctness, headline, render_report
from fitwork.telemetry.record import ReplicaSeries, RunRecord
from tests.report.records import GPU_HOST, gpu_samples, record
from tests.report.test_html_report import chromium, dump_dom, sections

LABELS = ["monolithic", "fitted"]
SCREENSHOT_COPY = Path("/tmp/fitwork-report-gpu.png")


@unit(cpu=1)
def double(x: int) -> int:
    return 2 * x


@pytest.fixture(scope="module")
def plan() -> Plan:
    """A real plan, for its shape; tests set the sides' throughputs they need."""
    pipeline = Pipeline(double, name="tiny")
    return plan_for(profile_pipeline(pipeline, range(8), samples=8), discover_local())


def predicting(plan: Plan, monolithic: float, fitted: float) -> Plan:
    """``plan`` with its sides predicting ``monolithic`` and ``fitted`` items/s exactly."""
    def side(s: PlanSide, rate: float) -> PlanSide:
        return s.model_copy(update={"result": s.result.model_copy(update={"throughput": rate}),
                                    "throughput_low": None, "throughput_high": None})
    return plan.model_copy(update={"monolithic": side(plan.monolithic, monolithic),
                                   "fitted": side(plan.fitted, fitted)})


def shown(text: str, page: str) -> bool:
    return escape(text) in page


def section(page: str, name: str) -> str:
    found = re.search(rf'<section id="{name}">(.*?)</section>', page, re.S)
    assert found, name
    return found.group(1)


# --- headline ------------------------------------------------------------------------------


def test_headline_when_the_fitted_side_wins() -> None:
    runs = [record("m", throughput=400.0), record("f", throughput=500.0)]
    verdict = headline(runs, LABELS)
    assert verdict.lead == ("fitted 500.0 items/s vs monolithic 400.0 items/s: 1.25\u00d7 "
                            "(measured, same host, same input)")
    assert verdict.details == [] and verdict.tone == "win"
    page = render_report(runs, LABELS)
    assert '<p class="verdict win"><strong>' + escape(verdict.lead) in page
    assert "LOSES" not in page


def test_headline_says_plainly_when_the_fitted_side_loses() -> None:
    # the fitted run comes first here: the baseline is found by its label
    runs = [record("f", throughput=300.0, p95=0.052), record("m", throughput=400.0, p95=0.020)]
    labels = ["fitted", "monolithic"]
    verdict = headline(runs, labels)
    assert verdict.lead == ("fitted LOSES to monolithic, 1.33\u00d7 slower: fitted 300.0 "
                            "items/s vs monolithic 400.0 items/s: 0.75\u00d7 (measured, same "
                            "host, same input)")
    assert verdict.details == ["fitted's p95 latency is 2.60\u00d7 worse (52.0 ms vs 20.0 ms)"]
    assert verdict.tone == "lose"
    page = render_report(runs, labels)
    assert '<p class="verdict lose">' in page
    assert shown(verdict.lead, page) and shown(verdict.details[0], page)
    assert page.index('id="headline"') < page.index('id="correctness"') < page.index(
        'id="setup"')


def test_headline_of_more_items_per_second_at_worse_latency_is_mixed() -> None:
    runs = [record("m", throughput=400.0, p95=0.020), record("f", throughput=508.0, p95=0.052)]
    verdict = headline(runs, LABELS)
    assert verdict.lead.startswith("fitted 508.0 items/s vs monolithic 400.0 items/s: 1.27\u00d7")
    assert verdict.details == ["fitted's p95 latency is 2.60\u00d7 worse (52.0 ms vs 20.0 ms)"]
    assert verdict.tone == "mixed"
    assert '<p class="verdict mixed">' in render_report(runs, LABELS)


def test_headline_puts_the_plans_prediction_beside_the_measurement(plan: Plan) -> None:
    runs = [record("m", throughput=400.0), record("f", throughput=500.0)]
    verdict = headline(runs, LABELS, predicting(plan, 500.0, 800.0))
    assert verdict.details == ["plan predicted 1.60\u00d7: fitted 800.0 items/s vs "
                               "monolithic 500.0 items/s"]
    assert verdict.text == (verdict.lead + "; " + verdict.details[0])
    page = render_report(runs, LABELS, predicting(plan, 500.0, 800.0))
    assert shown(verdict.details[0], page)


def test_headline_doubts_a_comparison_that_is_not_like_for_like() -> None:
    runs = [record("m", throughput=400.0), record("f", throughput=500.0, digest="ffff")]
    verdict = headline(runs, LABELS)
    assert verdict.tone == "doubt"
    assert verdict.lead.startswith("NOT LIKE FOR LIKE: fitted 500.0 items/s")
    assert verdict.lead.endswith("(measured, same host, same item count (100) but DIFFERENT "
                                 "outputs)")
    other = [record("m", throughput=400.0, host=None), record("f", throughput=500.0)]
    assert "host not recorded" in headline(other, LABELS).lead


def test_headline_of_a_single_run() -> None:
    verdict = headline([record("m", throughput=400.0)], ["monolithic"])
    assert verdict.lead == ("monolithic: 400.0 items/s (100 items in 0.25 s; measured, one "
                            "run, nothing to compare with)")
    assert verdict.tone == "even"


# --- correctness ---------------------------------------------------------------------------


def test_correctness_line_when_outputs_match() -> None:
    runs = [record("m", throughput=400.0), record("f", throughput=500.0)]
    text, tone = correctness(runs, LABELS)
    assert text == ("Correctness: monolithic 100 in, 100 completed, 100 outputs, 0 failures; "
                    "fitted 100 in, 100 completed, 100 outputs, 0 failures; same outputs "
                    "(digest 0123456789ab...)")
    assert tone == "ok"
    assert f'<p class="check ok">{escape(text)}</p>' in render_report(runs, LABELS)


def test_correctness_warns_when_outputs_differ_or_items_fail() -> None:
    runs = [record("m", throughput=400.0),
            record("f", throughput=500.0, digest="fedcba9876543210", failures=3)]
    text, tone = correctness(runs, LABELS)
    assert "fitted 100 in, 97 completed, 97 outputs, 3 failures" in text
    assert text.endswith("DIFFERENT OUTPUTS: monolithic 0123456789ab, fitted fedcba987654")
    assert tone == "warn"
    page = render_report(runs, LABELS)
    assert '<p class="check warn">\u26a0 Correctness: ' in page
    stopped = [record("m", throughput=400.0), record("f", throughput=500.0, status="aborted")]
    text, tone = correctness(stopped, LABELS)
    assert "(run ABORTED: stopped by a test)" in text and tone == "warn"


def test_correctness_says_when_outputs_were_not_checked() -> None:
    runs = [record("m", throughput=400.0), record("f", throughput=500.0, digest=None)]
    text, tone = correctness(runs, LABELS)
    assert text.endswith("outputs not checked (no output digest recorded for fitted)")
    assert tone == "unknown"
    text, _ = correctness(runs[:1], LABELS[:1])
    assert text.endswith("outputs not checked (one run)")


# --- host, workload, cores busy of the host, latency ------------------------------------------


def test_host_and_workload_are_described() -> None:
    refitted = ReplicaSeries(times_s=[0.0, 0.1], counts={"a": [3, 5], "b": [1, 1]})
    runs = [record("m", throughput=400.0),
            record("f", throughput=500.0, host=GPU_HOST, units={"a": (3, 0.25), "b": (1, 1.0)},
                   replicas=refitted)]
    setup = section(render_report(runs, LABELS), "setup")
    for text in ("box-1", "32.0 GiB", "Test CPU 3000 (cpu-x86)", "1 x NVIDIA H200 (141.0 GiB)",
                 "Runs compared: different hosts.", "Pipeline demo; source items: monolithic "
                 "100, fitted 100.", "3 (3-5 over the run)", "0.25"):
        assert escape(text) in setup, text
    assert setup.count("<tr>") == 2 + 1 + 3 + 1  # hosts and their head, units and theirs


def test_cores_busy_of_the_host_beside_fleet_utilization() -> None:
    # both runs keep every core they allocated busy (fleet 100%), but the monolithic run
    # holds 2 of the host's 8 cores for 1 s and the fitted one 1.2 cores for 0.8 s
    runs = [record("m", throughput=400.0, items=400, cpu_s=2.0, units={"fused": (2, 1.0)}),
            record("f", throughput=500.0, items=400, cpu_s=0.96,
                   units={"a": (1, 0.2), "b": (1, 1.0)})]
    html = section(render_report(runs, LABELS), "utilization")
    assert "Cores busy of the host" in html
    rows = re.findall(r"<tr><td class=\"l\">(\w+)</td><td>([\d.,]+)</td><td>([\d.]+)</td>"
                      r"<td>([\d.]+)</td><td>([\d.%-]+)</td><td>([\d-]+)</td>"
                      r"<td>([\d.%-]+)</td></tr>", html)
    assert rows == [("monolithic", "2.00", "1.00", "2", "100.0%", "8", "25.0%"),
                    ("fitted", "0.96", "0.80", "1.2", "100.0%", "8", "15.0%")]
    assert "fleet CPU: CPU s / (cores allocated x wall s)" in html
    assert "cores busy: CPU s / (host cores x wall s)" in html
    assert html.count("Two different figures") == 1
    bare = [r.model_copy(update={"host": None}) for r in runs]
    html = section(render_report(bare, LABELS), "utilization")
    assert "No record describes its host&#x27;s cores" in html
    assert "Cores busy of the host</text>" not in html


def test_latency_is_shown_beside_throughput_with_its_ratio() -> None:
    runs = [record("m", throughput=400.0, p50=0.010, p95=0.020),
            record("f", throughput=500.0, p50=0.025, p95=0.052)]
    html = section(render_report(runs, LABELS), "throughput")
    assert sections(render_report(runs, LABELS))["throughput"]["svg"] == 2
    assert escape("p95 latency: fitted 52.0 ms vs monolithic 20.0 ms, 2.60\u00d7 WORSE for "
                  "fitted (p50 ratio 2.50\u00d7)") in html
    assert ">52.0 ms<" in html and ">20.0 ms<" in html
    better = [runs[0], record("f", throughput=500.0, p95=0.010)]
    assert "2.00\u00d7 better for fitted" in section(render_report(better, LABELS),
                                                    "throughput")


# --- plots ------------------------------------------------------------------------------------


def polyline_points(svg: str) -> list[list[tuple[float, float]]]:
    return [[(float(x), float(y)) for x, y in (p.split(",") for p in points.split())]
            for points in re.findall(r'<polyline class="line" points="([^"]*)"', svg)]


def test_throughput_is_drawn_from_measured_completions() -> None:
    # workers are busy from 10% to 90% of the run, but items settle only in its second half
    late = record("f", throughput=100.0, completions=[(0.6, 40), (0.8, 80), (0.95, 100)])
    html = section(render_report([record("m", throughput=100.0), late], LABELS), "throughput")
    assert "measured completions" in html and "busy" not in html
    _, fitted = polyline_points(html)
    bottom = max(y for _, y in fitted)
    half = (fitted[0][0] + fitted[-1][0]) / 2
    assert all(y == bottom for x, y in fitted if x < half)
    assert any(y < bottom for x, y in fitted if x > half)
    none = late.model_copy(update={"completions": late.completions.model_copy(
        update={"times_s": [], "completed": []})})
    html = section(render_report([record("m", throughput=100.0), none], LABELS), "throughput")
    assert "fitted: the record has no measured completions, so no curve." in html
    assert len(polyline_points(html)) == 1


def test_a_prediction_far_off_the_measured_scale_is_not_drawn(plan: Plan) -> None:
    runs = [record("m", throughput=400.0), record("f", throughput=500.0)]
    near = section(render_report(runs, LABELS, predicting(plan, 450.0, 600.0)), "throughput")
    assert len(polyline_points(near)) == 4 and "left off this chart" not in near
    far = section(render_report(runs, LABELS, predicting(plan, 450.0, 9000.0)), "throughput")
    assert len(polyline_points(far)) == 3
    assert "The plan predicts fitted 9,000.0 items/s: more than 3\u00d7 the highest" in far


def test_device_samples_are_plotted_when_there_are_any() -> None:
    plain = [record("m", throughput=400.0), record("f", throughput=500.0)]
    page = render_report(plain, LABELS)
    assert sections(page)["devices"].get("svg", 0) == 0
    assert "No device samples in these records" in section(page, "devices")
    with_gpus = [plain[0], record("f", throughput=500.0, host=GPU_HOST,
                                  device_samples=gpu_samples(0.2))]
    page = render_report(with_gpus, LABELS)
    devices = section(page, "devices")
    assert sections(page)["devices"]["svg"] == 2  # utilization and memory of the one run
    assert "fitted: GPU utilization" in devices
    assert "fitted: GPU memory used (of 141.0 GiB)" in devices
    assert "monolithic: no device samples." in devices
    assert len(polyline_points(devices)) == 4  # two devices in each chart
    assert "GPU 0 (NVIDIA H200)" in devices and "GPU 1 (NVIDIA H200)" in devices
    assert ">50.0%<" in devices and ">54.5%<" in devices  # mean utilization per GPU


REFITS = [
    {"t_s": 0.05, "reason": "a is the bottleneck", "before": {"a": 3, "b": 1},
     "after": {"a": 5, "b": 1}, "predicted_before": 400.0, "predicted_after": 520.0},
    {"t_s": 0.12, "reason": "b queue grows", "before": {"a": 5, "b": 1},
     "after": {"a": 4, "b": 2}, "predicted_before": 520.0, "predicted_after": 600.0},
]


def refitted_run() -> RunRecord:
    series = ReplicaSeries(times_s=[0.0, 0.05, 0.12], counts={"a": [3, 5, 4], "b": [1, 1, 2]})
    run = record("f", throughput=500.0, units={"a": (3, 0.25), "b": (1, 1.0)},
                 replicas=series, host=GPU_HOST, device_samples=gpu_samples(0.2),
                 p95=0.052)
    return run.model_copy(update={"refits": REFITS})


def test_replicas_per_unit_are_plotted_with_each_refit_marked() -> None:
    page = render_report([record("m", throughput=400.0), refitted_run()], LABELS)
    replicas = section(page, "replicas")
    assert sections(page)["replicas"]["svg"] == 2
    assert "monolithic: live replicas per unit</text>" in replicas
    assert "fitted: live replicas per unit, 2 re-fits" in replicas
    assert replicas.count('class="marker"') == 2
    assert escape("re-fit at 0.05 s: a is the bottleneck; a 3 -> 5; predicted 400.0 -> "
                  "520.0 items/s") in replicas
    for cell in ("a 3-&gt;5", "a 5-&gt;4, b 1-&gt;2", "b queue grows", "520.0", "600.0"):
        assert cell in replicas, cell
    a, b = polyline_points(replicas.split("fitted: live")[-1])
    assert len(a) == 7  # 3, 5, 4 and held to the end: each change a vertical step
    assert a[1][0] == a[2][0] and a[3][0] == a[4][0]  # vertical steps at each re-fit
    assert a[0][1] > a[4][1] > a[2][1]  # 3 replicas lowest, 4 above, 5 highest (y is down)
    assert len(b) == 7
    plain = section(render_report([record("m", throughput=400.0)], ["monolithic"]),
                    "replicas")
    assert "No re-fits recorded" in plain and 'class="marker"' not in plain


def test_chromium_renders_a_report_with_devices_and_refits(tmp_path: Path) -> None:
    runs = [record("m", throughput=400.0, p95=0.020), refitted_run()]
    page = render_report(runs, LABELS)
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    dom, messages = dump_dom(tmp_path, path)
    assert messages == []
    assert sections(dom)["devices"]["svg"] == 2 and sections(dom)["replicas"]["svg"] == 2
    shot = tmp_path / "report.png"
    done = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,5600",
                    "--hide-scrollbars", path.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shutil.copyfile(shot, SCREENSHOT_COPY)
