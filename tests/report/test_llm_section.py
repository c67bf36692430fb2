"""The report's LLM section: CDFs against the SLO, busy per pool, the cost table, the CLI."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fitwork.cli import main
from fitwork.errors import InputError
from fitwork.llm.options import SLO
from fitwork.llm.plan import PlanSet, load_fleet, plan_llm
from fitwork.llm.report import llm_report_section, llm_section, render_llm_report
from fitwork.llm.sim import SimResult, simulate_llm
from fitwork.llm.trace import Trace, shipped_trace
from fitwork.report.html import LLM_SECTION, SECTIONS, render_report
from tests.llm import toy
from tests.report.records import record
from tests.report.test_html_report import sections


@pytest.fixture(scope="module")
def replayed() -> tuple[list, list[SimResult]]:
    """A hand-timed split plan replayed: two 1,000-token prompts at once on one prefill
    replica (TTFT 0.15 s and 0.30 s against an SLO of 0.2 s: half within)."""
    plan = toy.plan([("prefill", 1, 1), ("decode", 1, 8)], ttft=0.2, tpot=0.1)
    trace = Trace("hand", np.array([0.0, 0.0]), np.array([1000, 1000]), np.array([11, 11]))
    return [plan], [simulate_llm(plan, trace, book=toy.book(), keep_values=True)]


def _records() -> list:
    return [record("mono", throughput=50.0), record("fitted", throughput=80.0)]


def _llm_part(page: str) -> str:
    found = re.search(r'<section id="llm">.*?</section>', page, re.S)
    assert found is not None
    return found.group(0)


def test_section_follows_the_others_and_leaves_them_as_they_were(replayed) -> None:
    plans, sims = replayed
    records = _records()
    labels = ["monolithic", "fitted"]
    section = llm_report_section(plans, sims)
    without = render_report(records, labels, price_per_hour=2.0)
    page = render_report(records, labels, price_per_hour=2.0, llm=section)
    assert list(sections(page)) == [*SECTIONS, LLM_SECTION]
    part = _llm_part(page)
    # Every other section is byte for byte what the page without the LLM section holds.
    assert page.replace(part, "").replace("\n</body>", "</body>") == without
    # `fitwork llm report` and `fitwork.llm.report.llm_section` give the same section.
    assert part == llm_section(plans, sims)
    assert _llm_part(render_llm_report(plans, sims)) == part
    for chart in re.findall(r"<svg.*?</svg>", page, re.S):
        ET.fromstring(chart)


def test_section_holds_the_cdfs_busy_and_costs_of_the_replay(replayed) -> None:
    plans, sims = replayed
    plan, sim = plans[0], sims[0]
    part = _llm_part(render_report([], llm=llm_report_section(plans, sims)))
    tags = sections(part)[LLM_SECTION]
    assert tags["svg"] == 3  # TTFT CDF, TPOT CDF, busy per pool of the one plan
    # A CDF line per plan on each CDF chart, a line per pool on the busy chart.
    assert tags["polyline"] == 2 + len(sim.pools)
    assert "SLO 0.2 s" in part and "SLO 100 ms" in part
    assert sorted(sim.ttft_values) == pytest.approx([0.15, 0.30], abs=1e-9)
    assert sim.attained == 0.5 and "50.0%" in part
    tokens = sim.goodput * (plan.mean_prompt + plan.mean_output)
    replayed_cost = plan.cost_per_hour / (tokens * 3600) * 1e6
    row = re.search(r"<tr><td class=\"l\">toy split</td>(.*?)</tr>", part)
    assert row is not None
    cells = re.findall(r"<td>(.*?)</td>", row.group(1))
    assert cells[:5] == ["2", "$1.00", f"{plan.goodput:.3f}", f"{sim.goodput:.3f}", "50.0%"]
    assert cells[6] == f"${replayed_cost:,.3f}"
    assert cells[7].endswith(f"/ {sim.ttft['p90']:.3f}")
    assert cells[8].endswith(f"/ {sim.tpot['p90'] * 1e3:.1f}")
    for pool in sim.pools:
        name = f"{pool.phase} {pool.device_class} TP{pool.tp} x{pool.replicas}"
        assert f"<td class=\"l\">{name}</td><td>{pool.busy:.0%}</td>" in part
        assert f"<title>{name}</title>" in part  # its busy line
    # The busy line of each pool has a point per time bin of the replay.
    lines = re.findall(r'<polyline [^>]*points="([^"]*)"[^>]*><title>(prefill|decode) ', part)
    assert [len(points.split()) for points, _ in lines] == \
        [len(p.busy_over_time) for p in sim.pools]


def test_a_page_needs_records_or_the_section(replayed) -> None:
    plans, sims = replayed
    with pytest.raises(InputError, match="at least one run record"):
        render_report([])
    page = render_report([], llm=llm_report_section(plans, sims), title="only <llm>")
    assert list(sections(page)) == [LLM_SECTION]
    assert "<title>only &lt;llm&gt;</title>" in page and page.rstrip().endswith("</html>")
    with pytest.raises(ValueError, match="one replay per plan"):
        llm_report_section(plans, [])


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PlanSet]:
    trace = shipped_trace("conv").head(1500)
    plans = plan_llm("llama2-70b", trace, load_fleet("h100"),
                     SLO.parse("ttft_p90=2s,tpot_p90=150ms"))
    path = tmp_path_factory.mktemp("llm") / "plans.json"
    path.write_text(plans.model_dump_json(), encoding="utf-8")
    return path, plans


def test_report_command_adds_the_llm_section(tmp_path: Path, plan_file) -> None:
    path, plans = plan_file
    mono = tmp_path / "mono.json"
    _records()[0].save(mono)
    runner = CliRunner()
    out = tmp_path / "r.html"
    done = runner.invoke(main, ["report", str(mono), "--llm", str(path), "--llm-trace", "conv",
                                "--llm-at-goodput", "-o", str(out)])
    assert done.exit_code == 0, done.output
    page = out.read_text(encoding="utf-8")
    assert list(sections(page)) == [*SECTIONS, LLM_SECTION]
    part = _llm_part(page)
    best = plans.best_colocated()
    for plan in (plans.split, best):
        assert f"<td class=\"l\">{plan.label}</td>" in part
        for pool in plan.pools:
            assert f"{pool.phase} {pool.device_class} TP{pool.tp} x{pool.replicas}" in part
    assert sections(page)[LLM_SECTION]["svg"] == 4  # two CDFs, busy of each plan
    # The LLM section alone, and the same from `fitwork llm report`.
    alone = tmp_path / "alone.html"
    done = runner.invoke(main, ["report", "--llm", str(path), "--trace", "conv",
                                "--llm-at-goodput", "-o", str(alone)])
    assert done.exit_code == 0, done.output
    assert list(sections(alone.read_text(encoding="utf-8"))) == [LLM_SECTION]
    same = tmp_path / "same.html"
    done = runner.invoke(main, ["llm", "report", str(path), "--trace", "conv", "--at-goodput",
                                "-o", str(same)])
    assert done.exit_code == 0, done.output
    assert _llm_part(same.read_text(encoding="utf-8")) == part


def test_report_command_refuses_half_an_llm_request(tmp_path: Path, plan_file) -> None:
    path, _ = plan_file
    runner = CliRunner()
    nothing = runner.invoke(main, ["report", "-o", str(tmp_path / "x.html")])
    assert nothing.exit_code == 2 and "Missing argument 'RECORD...'" in nothing.output
    half = runner.invoke(main, ["report", "--llm", str(path), "-o", str(tmp_path / "x.html")])
    assert half.exit_code == 2 and "--llm PLAN and --llm-trace TRACE together" in half.output
    bad = runner.invoke(main, ["report", "--llm", str(tmp_path / "nope.json"), "--llm-trace",
                               "conv", "-o", str(tmp_path / "x.html")])
    assert bad.exit_code == 1 and "cannot read" in bad.output
    assert not (tmp_path / "x.html").exists()
