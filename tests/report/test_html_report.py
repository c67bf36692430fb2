"""The HTML report: its sections, that it is self-contained, and how headless Chromium shows it."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

import fitwork
from fitwork import InputError, Pipeline, RunRecord, unit
from fitwork.commands.report import report
from fitwork.fit.plan import Plan, plan_for
from fitwork.hardware.catalog import catalog
from fitwork.hardware.discover import discover_local
from fitwork.profiling import profile_pipeline
from fitwork.report.html import (
    SECTIONS,
    cost_per_million,
    default_labels,
    render_report,
    run_price,
)
from fitwork.report.svg import (
    BarSeries,
    GanttRow,
    LineSeries,
    Marker,
    bar_chart,
    gantt,
    legend_height,
    line_chart,
)
from fitwork.telemetry.utilization import ClassFigures, RunFigures, run_figures

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT_COPY = Path("/tmp/fitwork-report.png")
FITTED_ORANGE = (0xF2, 0x8E, 0x2B)  # the second run's colour in every chart


@unit(cpu=0.25)
def wait(x: int) -> int:
    time.sleep(0.004)
    return x


@unit(cpu=1)
def crunch(x: int) -> int:
    return sum(i * i for i in range(3000)) % 97 + x


@unit(kind="filter", cpu=0.25)
def odd(x: int) -> bool:
    return x % 2 == 1


PIPELINE = Pipeline(wait, crunch, odd, name="small")
ITEMS = 120
SCREEN = (1400, 5200)  # tall enough for the whole report of two runs without device samples


def this_host() -> dict[str, object]:
    """This host as a run record describes it, for records written before the engine did."""
    return {"name": platform.node() or "localhost", "cores": os.cpu_count() or 1,
            "cpu_class": "cpu-x86" if platform.machine() in ("x86_64", "AMD64") else "cpu-arm",
            "cpu_model": platform.processor() or platform.machine(), "gpus": []}


@pytest.fixture(scope="module")
def runs() -> tuple[list[RunRecord], Plan]:
    """A monolithic and a fitted run of the same small pipeline, and a plan for this host."""
    plan = plan_for(profile_pipeline(PIPELINE, range(16), samples=16), discover_local())
    records = []
    fused = PIPELINE.fused()
    for pipeline, workers in ((fused, {fused.units[0].name: 2}), (PIPELINE, {"wait": 3})):
        with fitwork.run(pipeline, range(ITEMS), workers=workers) as result:
            assert len(list(result)) == ITEMS // 2
        record = result.record
        if record.host is None:
            record = record.model_copy(update={"host": this_host()})
        records.append(record)
    return records, plan


@pytest.fixture(scope="module")
def page(runs: tuple[list[RunRecord], Plan]) -> str:
    records, plan = runs
    return render_report(records, ["monolithic", "fitted"], plan=plan)


class Sections(HTMLParser):
    """Counts the tags inside each ``<section id=...>`` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.current: str | None = None
        self.tags: dict[str, dict[str, int]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self.current = dict(attrs).get("id") or ""
            self.tags[self.current] = {}
        elif self.current is not None:
            counts = self.tags[self.current]
            counts[tag] = counts.get(tag, 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.current = None


def sections(html: str) -> dict[str, dict[str, int]]:
    parser = Sections()
    parser.feed(html)
    return parser.tags


def check_sections(html: str, records: list[RunRecord]) -> None:
    found = sections(html)
    assert list(found) == list(SECTIONS)
    for name in ("timeline", "utilization", "throughput", "queues", "replicas"):
        assert found[name].get("svg", 0) >= 1, name
    assert found["headline"] == {"p": 1, "strong": 1, "span": 1}
    assert found["correctness"] == {"p": 1}
    assert found["timeline"]["svg"] == len(records)
    assert found["timeline"]["rect"] > sum(len(r.workers) for r in records)
    # fleet, cores busy of the host and server capacity; no FLOPs, no MFU
    assert found["utilization"]["svg"] == 3
    # measured runs, and both predictions unless they are off the measured scale
    drawn = 0 if "left off this chart" in html else 2
    assert found["throughput"]["svg"] == 2  # throughput over time, latency bars
    assert found["throughput"]["polyline"] == len(records) + drawn
    assert found["replicas"]["svg"] == len(records)
    assert found["devices"].get("svg", 0) == 0  # no GPU sampled in these runs
    # memory and open files of every run's processes, two charts per run
    assert found["processes"]["svg"] == 2 * len(records)
    assert found["queues"]["svg"] == len(records)
    assert found["setup"]["table"] == 2
    assert found["summary"]["tr"] == len(records) + 1
    assert found["cost"]["tr"] == len(records) + 3  # runs, both predictions, the head


def test_every_section_is_there_with_its_plots(page: str,
                                               runs: tuple[list[RunRecord], Plan]) -> None:
    records, _ = runs
    check_sections(page, records)
    assert page.count('class="idle"') == sum(len(r.workers) for r in records)
    assert "predicted: plan fitted" in page and "predicted: plan monolithic" in page
    assert "monolithic" in page and "fitted" in page
    mono, fitted = records
    assert (f"fitted {fitted.throughput:,.1f} items/s vs monolithic "
            f"{mono.throughput:,.1f} items/s") in page
    assert "Correctness: monolithic 120 in, 120 completed, 60 outputs, 0 failures" in page
    assert "Cores busy of the host" in page


def test_the_page_is_self_contained(page: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "<script" not in page.lower()
    assert "<link" not in page.lower()
    assert "@import" not in page and "url(http" not in page
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


def test_every_svg_is_well_formed_xml(page: str) -> None:
    charts = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(charts) >= 9
    for chart in charts:
        ET.fromstring(chart)


def test_text_from_records_and_labels_is_escaped(runs: tuple[list[RunRecord], Plan]) -> None:
    records, _ = runs
    html = render_report(records, ["<b>mono</b>", "fit & ted"], price_per_hour=1.0)
    assert "<b>mono</b>" not in html
    assert "&lt;b&gt;mono&lt;/b&gt;" in html and "fit &amp; ted" in html
    assert "given: $1/h" in html
    assert sections(html)["utilization"]["svg"] == 2  # no plan: no capacity figure


def test_mfu_is_drawn_when_flops_are_known(runs: tuple[list[RunRecord], Plan]) -> None:
    records, plan = runs
    flops = [{"small_fused": 6e3}, {"crunch": 6e3}]
    given = [run_figures(r, plan, f) for r, f in zip(records, flops, strict=True)]
    html = render_report(records, ["monolithic", "fitted"], plan, given)
    assert sections(html)["utilization"]["svg"] == 4
    assert "Model-FLOPs utilization (MFU) per device class" in html
    with pytest.raises(InputError, match="1 sets of figures for 2 run records"):
        render_report(records, figures=given[:1])


def test_bad_arguments_are_refused(runs: tuple[list[RunRecord], Plan]) -> None:
    records, _ = runs
    with pytest.raises(InputError, match="at least one run record"):
        render_report([])
    with pytest.raises(InputError, match="1 labels for 2 run records"):
        render_report(records, ["one"])
    with pytest.raises(InputError, match="units gpu_thing, which no run record has"):
        render_report(records, classes={"gpu_thing": "T4"})


def test_default_labels_tell_runs_apart(runs: tuple[list[RunRecord], Plan]) -> None:
    records, _ = runs
    html = render_report([records[1], records[1]])
    assert escape(f"split [small: wait x3, crunch x1, odd x1] ({records[1].run_id})") in html
    # the layout that ran, not the pipeline's name: the fused baseline is monolithic
    assert default_labels([records[0]]) == ["monolithic [2 replicas]"]


def figures(classes: list[ClassFigures]) -> RunFigures:
    return RunFigures(run_id="r", pipeline="p", wall_s=10.0, throughput=100.0, classes=classes)


def row(name: str, allocated: float) -> ClassFigures:
    return ClassFigures(device_class=name, allocated=allocated, allocated_s=allocated * 10,
                        busy_s=1.0, utilization=0.1, basis="")


def test_cost_per_million_and_the_basis_of_the_price(runs: tuple[list[RunRecord], Plan]
                                                     ) -> None:
    assert cost_per_million(3.6, 1.0) == pytest.approx(1000.0)
    assert cost_per_million(None, 1.0) is None and cost_per_million(1.0, 0.0) is None
    one = figures([row("cpu-x86", 2.0), row("T4", 0.5)])
    assert run_price(one, price_per_hour=2.5) == (2.5, "given: $2.5/h")
    price, basis = run_price(one)
    known = catalog()
    cpu, t4 = known.get("cpu-x86").price_per_hour, known.get("T4").price_per_hour
    assert cpu is not None and t4 is not None
    assert price == pytest.approx(2 * cpu + 0.5 * t4)
    assert basis == ("devices allocated, at catalog prices: "
                     f"2 x cpu-x86 at ${cpu:g}/h + 0.5 x T4 at ${t4:g}/h")
    assert run_price(figures([row("gpu", 1.0)])) == (
        None, "no catalog price for device class gpu")
    _, plan = runs
    price, basis = run_price(one, plan)
    assert price == plan.fitted.result.cost_per_hour
    assert "nodes the plan's fitted side uses" in basis


def test_svg_charts_are_well_formed_on_their_own() -> None:
    charts = [
        gantt([GanttRow("a #1", "a", (0.0, 2.0), [(0.1, 0.5), (1.0, 1.9)], "#123456", "t<>")],
              2.0, label="g & h"),
        bar_chart(["cpu"], [BarSeries("x", {"cpu": 0.5}, "#111111"),
                            BarSeries("y", {"cpu": 1.7}, "#222222", hatched=True)]),
        line_chart([LineSeries("l", [(0, 1), (1, 3)], "#333333", step=True),
                    LineSeries("d", [(0, 2), (2, 2)], "#444444", dashed=True)], 2.0),
        line_chart([], 0.0),
        bar_chart(["p95"], [BarSeries("a", {"p95": 47.0}, "#111111"),
                            BarSeries("b", {"p95": 1234.5}, "#222222")], percent=False,
                  unit=" ms"),
        line_chart([LineSeries("n", [(0, 1), (1, 1)], "#333333", step=True, nudge=5)], 1.0,
                   y_max=4.0, markers=[Marker(0.5, "re-fit 1", "why <this>")]),
    ]
    for chart in charts:
        root = ET.fromstring(chart)
        assert root.tag == "svg"
    assert "g &amp; h" in charts[0] and "t&lt;&gt;" in charts[0]
    assert "170.0%" in charts[1] and ">180%<" in charts[1]
    assert ">47.0 ms<" in charts[4] and ">1,234 ms<" in charts[4]
    assert charts[5].count('class="marker"') == 1 and "why &lt;this&gt;" in charts[5]
    assert ">4<" in charts[5]  # the y axis runs to y_max


def test_legends_take_fewer_columns_for_long_names() -> None:
    assert legend_height(["a", "b", "c", "d"]) == 16
    assert legend_height(["a", "b", "c", "d", "e"]) == 32
    long = ["predicted: plan monolithic (10,333.5 items/s)"] * 4
    assert legend_height(long) > 16


def test_report_command(tmp_path: Path, runs: tuple[list[RunRecord], Plan]) -> None:
    records, plan = runs
    for name, record in zip(("mono.json", "fitted.json"), records, strict=True):
        record.save(tmp_path / name)
    plan.save(tmp_path / "plan.json")
    runner = CliRunner()
    out = tmp_path / "out" / "report.html"
    done = runner.invoke(report, [str(tmp_path / "mono.json"), str(tmp_path / "fitted.json"),
                                  "--label", "monolithic", "--label", "fitted", "--plan",
                                  str(tmp_path / "plan.json"), "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert "wrote report of 2 runs" in done.output
    assert "fitted" in done.output and "vs monolithic" in done.output  # the headline
    check_sections(out.read_text(), records)
    missing = runner.invoke(report, [str(tmp_path / "nope.json")])
    assert missing.exit_code == 1 and "no such file" in missing.output
    labels = runner.invoke(report, [str(tmp_path / "mono.json"), "--label", "a", "--label",
                                    "b"])
    assert labels.exit_code == 1 and "2 --label for 1 records" in labels.output
    wrong = runner.invoke(report, [str(tmp_path / "plan.json")])
    assert wrong.exit_code == 1 and "not a fitwork run record" in wrong.output
    bad = runner.invoke(report, [str(tmp_path / "mono.json"), "--device-class", "x"])
    assert bad.exit_code == 2 and "UNIT=CLASS" in bad.output


# --- headless Chromium ---------------------------------------------------------------------


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium with no network, no extensions, a throwaway profile."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--disable-extensions",
               "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def console_messages(stderr: str) -> list[str]:
    """The page's console output as Chromium logs it with --enable-logging=stderr."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def dump_dom(tmp_path: Path, page: Path) -> tuple[str, list[str]]:
    done = chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, console_messages(done.stderr)


def test_the_console_check_catches_a_script_error(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p>"
                    "<script>missing_function();</script></body></html>")
    _, messages = dump_dom(tmp_path, page)
    assert any("Uncaught ReferenceError" in m for m in messages), messages


def test_chromium_renders_the_report(tmp_path: Path, page: str,
                                     runs: tuple[list[RunRecord], Plan]) -> None:
    records, _ = runs
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    dom, messages = dump_dom(tmp_path, path)
    assert messages == []
    for name in SECTIONS:
        assert f'id="{name}"' in dom
    check_sections(dom, records)

    shot = tmp_path / "report.png"
    done = chromium(tmp_path, f"--screenshot={shot}", f"--window-size={SCREEN[0]},{SCREEN[1]}",
                    "--hide-scrollbars", path.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 20_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shutil.copyfile(shot, SCREENSHOT_COPY)
    image_module = pytest.importorskip("PIL.Image")
    with image_module.open(shot) as image:
        assert image.size == SCREEN
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50
    orange = sum(count for count, rgb in colours if rgb == FITTED_ORANGE)
    assert orange > 500, "the fitted run's bars and busy intervals should be drawn"
