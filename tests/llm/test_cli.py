"""`fitwork llm`: plan to a file, replay it; bad input as one line with the place."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fitwork.cli import main


def test_plan_then_simulate(tmp_path) -> None:
    trace = tmp_path / "t.csv"
    from fitwork.llm.trace import shipped_trace

    conv = shipped_trace("conv").head(1500)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for a, p, o in zip(conv.arrival, conv.prompt, conv.output, strict=True):
        whole = int(a)
        rows.append(f"2023-11-16 18:{whole // 60 % 60:02d}:{whole % 60:02d}."
                    f"{int((a - whole) * 1e6):06d},{p},{o}")
    trace.write_text("\n".join(rows) + "\n")
    plans = tmp_path / "plans.json"
    runner = CliRunner()
    out = runner.invoke(main, ["llm", "plan", "--model", "llama2-70b", "--trace", str(trace),
                               "--fleet", "mixed", "--slo", "ttft_p90=2s,tpot_p90=150ms",
                               "-o", str(plans)])
    assert out.exit_code == 0, out.output
    assert "phase-split: goodput" in out.output and "bottleneck:" in out.output
    assert "colocated best mix" in out.output
    out = runner.invoke(main, ["llm", "simulate", str(plans), "--trace", str(trace),
                               "--which", "split", "--at-goodput", "--json"])
    assert out.exit_code == 0, out.output
    figures = json.loads(out.output)
    assert figures[0]["completed"] + figures[0]["dropped"] == 1500


def test_bad_input_is_one_line(tmp_path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,4\n"
                     "2023-11-16 18:15:47.1,3\n")
    runner = CliRunner()
    out = runner.invoke(main, ["llm", "plan", "--model", "llama2-70b", "--trace", str(trace),
                               "--fleet", "mixed", "--slo", "ttft_p90=2s,tpot_p90=150ms"])
    assert out.exit_code == 1
    assert out.output.strip() == f"error: {trace}:3: 2 fields, expected 3 " \
                                 "(TIMESTAMP,ContextTokens,GeneratedTokens)"
    out = runner.invoke(main, ["llm", "simulate", str(trace), "--trace", "conv"])
    assert out.exit_code == 1 and "not a plan file" in out.output


def test_phases_and_trace_commands() -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["llm", "phases"])
    assert out.exit_code == 0, out.output
    assert "all rows, decode: n=152" in out.output
    assert "prefill  A100-80GB -> H100-SXM: n=76" in out.output
    out = runner.invoke(main, ["llm", "trace", "code"])
    assert out.exit_code == 0 and "requests       8,819" in out.output
