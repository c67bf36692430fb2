"""`fitwork report --fleet`: a real fleet run's record on one page, and its verdict's cases."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fitwork import FleetRecord, render_fleet_report
from fitwork.jobs.record import Decision, JobOutcome, Sample, epochs
from fitwork.report.fleet import FLEET_SECTIONS, fleet_headline
from fitwork.report.fleet_figures import main_epoch
from tests.report.test_html_report import chromium, dump_dom

FITWORK = str(Path(sys.executable).with_name("fitwork"))
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jobs"
ITEMS = 60  # per input (tokens gets half); small, so the fleet run takes seconds
TIMEOUT = 400
PERCENT = re.compile(r"(\d+(?:\.\d+)?)%")


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FleetRecord, str]:
    """The example's three pipelines planned, run together and reported, all by the CLI:
    the page's path, the fleet record, and what `fitwork report --fleet` printed."""
    root = tmp_path_factory.mktemp("fleet")
    for name in ("jobs.yaml", "scoring.py", "tokens.py", "lookup.py", "make_inputs.py"):
        shutil.copyfile(EXAMPLE / name, root / name)
    made = _run([sys.executable, "make_inputs.py", str(ITEMS)], root)
    assert made.returncode == 0, made.stderr
    plan = _run([FITWORK, "plan", "--jobs", "jobs.yaml", "-o", "fleet.json"], root)
    assert plan.returncode == 0, plan.stderr[-3000:]
    ran = _run([FITWORK, "run", "--jobs", "jobs.yaml", "--plan", "fleet.json",
                "--fleet-record", "fleet-record.json"], root)
    assert (root / "fleet-record.json").exists(), ran.stderr[-3000:]
    page = root / "pages" / "fleet.html"
    shown = _run([FITWORK, "report", "--fleet", "fleet-record.json", "-o", str(page)], root)
    assert shown.returncode == 0, shown.stderr[-3000:]
    return page, FleetRecord.load(root / "fleet-record.json"), shown.stdout + shown.stderr


def _section(html: str, name: str) -> str:
    start = html.index(f'<section id="{name}">')
    return html[start:html.index("</section>", start)]


def _percents(text: str) -> list[float]:
    return [float(v) for v in PERCENT.findall(re.sub(r"<[^>]+>", " ", text))]


def test_a_real_fleet_run_on_one_page(fleet_run: tuple[Path, FleetRecord, str]) -> None:
    path, record, printed = fleet_run
    html = path.read_text(encoding="utf-8")
    for name in FLEET_SECTIONS:
        assert f'<section id="{name}">' in html
    verdict = fleet_headline(record)
    assert verdict.text in printed and "wrote fleet report of 3 pipelines" in printed
    headline = _section(html, "headline")
    assert record.planned and verdict.tone in ("win", "lose", "mixed", "doubt")
    epoch = main_epoch(record)
    assert epoch is not None and len(epoch.running) >= 2
    for name in epoch.running:
        assert re.search(rf"{name} \d+% vs \d+% planned", headline), headline
    shares = _section(html, "shares")
    for name in ("scoring", "tokens", "lookup"):
        assert shares.count(f"<title>{name} realized</title>") == 1
        assert shares.count(f"<title>{name} planned</title>") == 1
    assert shares.count('<g class="marker">') == 2 * len(record.decisions)
    decisions = _section(html, "decisions")
    assert len(record.decisions) >= 3  # the arrivals, then each departure but the last's
    for d in record.decisions:
        assert d.reason in decisions


def test_the_page_states_each_pipeline_and_never_over_100_percent(
        fleet_run: tuple[Path, FleetRecord, str]) -> None:
    path, record, _ = fleet_run
    html = path.read_text(encoding="utf-8")
    table = _section(html, "pipelines")
    for o in record.jobs:
        assert f"<td class=\"l\">{o.name}</td><td class=\"l\">{o.team}</td>" \
               f"<td class=\"l\">{o.status}</td>" in table
        assert o.record is not None
        href = re.search(rf'<a href="([^"]+)">{o.name}</a>', table)
        assert href is not None and (path.parent / href.group(1)).resolve() == \
            Path(o.record).resolve()
    figures = re.sub(r'<p class="check warn">.*?</p>', "", _section(html, "utilization"))
    assert all(v <= 100.0 for v in _percents(figures))  # findings say what went over
    assert "search" in _section(html, "cost") and "nlp" in _section(html, "cost")


def test_chromium_renders_the_fleet_page(tmp_path: Path,
                                         fleet_run: tuple[Path, FleetRecord, str]) -> None:
    path, _, _ = fleet_run
    dom, messages = dump_dom(tmp_path, path)
    assert messages == []
    for name in FLEET_SECTIONS:
        assert f'id="{name}"' in dom
    shot = tmp_path / "fleet.png"
    done = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,3200",
                    "--hide-scrollbars", path.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


# --- the verdict's cases, on records built with chosen figures ------------------------------


def _record(used: dict[str, float], given: dict[str, float], *, cores: int = 2,
            planned: bool = True, seconds: float = 10.0) -> FleetRecord:
    """Two pipelines from 0 to ``seconds``: each used ``used`` cores, was given ``given``."""
    decisions = [Decision(at_s=0.0, reason="a arrived; b arrived", running=["a", "b"],
                          cores=given, rates={"a": 10.0, "b": 5.0})]
    samples = [Sample(at_s=t / 2, cpu_s={n: c * t / 2 for n, c in used.items()},
                      planned_cores=given) for t in range(int(seconds * 2) + 1)]
    jobs = [JobOutcome(name=n, team=team, status="succeeded", exit_code=0, started_s=0.0,
                       ended_s=seconds, cpu_s=used[n] * seconds, record=f"/nowhere/{n}.json")
            for n, team in (("a", "red"), ("b", "blue"))]
    return FleetRecord(fitwork_version="test", planned=planned, host_cores=cores,
                       teams={"a": "red", "b": "blue"}, jobs=jobs, decisions=decisions,
                       samples=samples, epochs=epochs(decisions, samples, cores),
                       cost_per_team={"red": 0.02, "blue": 0.01} if planned else {})


def test_shares_on_plan_are_a_win() -> None:
    verdict = fleet_headline(_record({"a": 1.0, "b": 0.5}, {"a": 1.0, "b": 0.5}))
    assert verdict.tone == "win"
    assert verdict.lead.startswith("Every pipeline within \u00b110% of its planned share")
    assert "a 67% vs 67% planned (1.00\u00d7)" in verdict.lead


def test_a_missed_share_is_said_as_a_miss() -> None:
    record = _record({"a": 1.4, "b": 0.6}, {"a": 1.0, "b": 1.0})
    verdict = fleet_headline(record)
    assert verdict.tone == "lose"
    assert verdict.lead.startswith("SHARE MISSED for a, b")
    assert "a 70% vs 50% planned (1.40\u00d7, MISSED: 20 points over)" in verdict.lead
    assert "b 30% vs 50% planned (0.60\u00d7, MISSED: 20 points under)" in verdict.lead
    html = render_fleet_report(record)
    assert '<p class="verdict lose">' in html and html.count("MISSED") >= 4


def test_use_beyond_the_allocation_is_a_finding_not_a_figure_over_100_percent() -> None:
    record = _record({"a": 1.2, "b": 0.6}, {"a": 0.6, "b": 0.3})
    html = render_fleet_report(record)
    utilization = _section(html, "utilization")
    assert "Finding, 0.0-10.0 s: the pipelines used 1.80 cores, more than the 0.90 the plan " \
           "allocated them (200% of it)" in utilization
    figures = utilization[:utilization.index('<p class="check warn">')]
    assert all(v <= 100.0 for v in _percents(figures))
    assert "100.0%" in figures  # busy / allocated, held to 100%


def test_an_unplanned_run_has_no_shares_to_check_and_no_cost() -> None:
    record = _record({"a": 1.0, "b": 1.0}, {}, planned=False)
    verdict = fleet_headline(record)
    assert verdict.tone == "doubt" and verdict.lead.startswith("NO SHARES TO CHECK")
    html = render_fleet_report(record)
    assert "the run was not planned" in _section(html, "cost")
    assert "<title>a realized</title>" in _section(html, "shares")


def test_a_fleet_record_among_run_records_is_pointed_to_fleet(tmp_path: Path) -> None:
    path = tmp_path / "fleet-record.json"
    _record({"a": 1.0, "b": 0.5}, {"a": 1.0, "b": 0.5}).save(path)
    wrong = _run([FITWORK, "report", str(path), "-o", str(tmp_path / "r.html")], tmp_path)
    assert wrong.returncode == 1 and "a fleet record, not a run record" in wrong.stderr
    assert f"fitwork report --fleet {path}" in wrong.stderr
    both = _run([FITWORK, "report", "--fleet", str(path), str(path)], tmp_path)
    assert both.returncode == 2 and "--fleet renders a fleet record" in both.stderr
    right = _run([FITWORK, "report", "--fleet", str(path), "-o", "f.html"], tmp_path)
    assert right.returncode == 0 and (tmp_path / "f.html").exists()
    assert "Every pipeline within" in right.stderr


def test_a_departure_shows_who_sped_up_and_how_soon() -> None:
    decisions = [Decision(at_s=0.0, reason="a arrived; b arrived", running=["a", "b"],
                          cores={"a": 1.0, "b": 1.0}),
                 Decision(at_s=5.0, reason="b finished", running=["a"], cores={"a": 2.0})]
    samples = []
    for step in range(21):
        t = step / 2
        a = 0.5 * t if t <= 5 else 2.5 + 1.0 * (t - 5)  # 0.5 cores, then 1.0 after b left
        samples.append(Sample(at_s=t, cpu_s={"a": a} | ({"b": 0.5 * t} if t < 5 else {})))
    jobs = [JobOutcome(name="a", team="red", status="succeeded", exit_code=0, started_s=0.0,
                       ended_s=10.0, cpu_s=7.5),
            JobOutcome(name="b", team="red", status="succeeded", exit_code=0, started_s=0.0,
                       ended_s=5.0, cpu_s=2.25)]
    record = FleetRecord(fitwork_version="test", planned=True, host_cores=2,
                         teams={"a": "red", "b": "red"}, jobs=jobs, decisions=decisions,
                         samples=samples, epochs=epochs(decisions, samples, 2))
    decisions_html = _section(render_fleet_report(record), "decisions")
    assert "a 0.50 -&gt; 1.00 (halfway in 1.0 s)" in decisions_html
