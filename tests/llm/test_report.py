"""The HTML LLM section: CDFs against the SLO, busy per pool, the cost table."""

from __future__ import annotations

import numpy as np

from fitwork.llm.report import llm_section, render_llm_report
from fitwork.llm.sim import simulate_llm
from fitwork.llm.trace import Trace
from tests.llm import toy


def test_section_holds_cdfs_busy_and_costs() -> None:
    plan = toy.plan([("prefill", 1, 1), ("decode", 1, 8)], ttft=0.2, tpot=0.1)
    trace = Trace("hand", np.array([0.0, 0.0]), np.array([1000, 1000]), np.array([11, 11]))
    sim = simulate_llm(plan, trace, book=toy.book(), keep_values=True)
    html = llm_section([plan], [sim])
    assert html.startswith('<section id="llm">')
    assert html.count("<svg") == 3  # TTFT CDF, TPOT CDF, busy per pool
    assert "SLO 0.2 s" in html and "SLO 100 ms" in html
    assert "prefill A100-80GB TP1 x1" in html and "50.0%" in html  # half within both SLOs
    page = render_llm_report([plan], [sim])
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
