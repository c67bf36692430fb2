"""Phase models name the serving stack their rows come from; a framework the user names."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from fitwork.cli import main
from fitwork.llm.options import SLO
from fitwork.llm.phases import (
    SPLITWISE_STACK,
    UNNAMED,
    LLMInputError,
    PhaseBook,
    default_book,
    load_phase_csv,
    load_splitwise,
    write_phase_csv,
)
from fitwork.llm.plan import load_fleet, plan_split
from fitwork.llm.trace import shipped_trace


def _faster_h100(tmp_path, framework: str | None):
    """Splitwise's H100 rows at 0.6x the time, as another stack's measurements would be."""
    rows = [dataclasses.replace(r, prefill_s=r.prefill_s and r.prefill_s * 0.6,
                                decode_s=r.decode_s and r.decode_s * 0.6,
                                framework=framework or UNNAMED)
            for r in load_splitwise() if r.device_class == "H100-SXM"]
    path = tmp_path / "rows.csv"
    write_phase_csv(rows, path)
    if framework is None:  # the same rows without the framework column
        lines = path.read_text().splitlines()
        path.write_text("\n".join(ln.rsplit(",", 1)[0] for ln in lines) + "\n")
    return path


def test_shipped_models_name_splitwise_and_transfers_keep_it() -> None:
    book = default_book()
    assert {m.stack for m in book.fitted.values()} == {SPLITWISE_STACK}
    assert book.get("llama2-70b", "H200", 2).stack == SPLITWISE_STACK
    assert "vLLM" in book.stack_of("llama2-70b", [("A100-80GB", 2)])


def test_a_named_framework_fits_only_its_rows(tmp_path) -> None:
    path = _faster_h100(tmp_path, None)
    rows = load_phase_csv(path, framework="TensorRT-LLM 0.x")
    assert {r.framework for r in rows} == {"TensorRT-LLM 0.x"}
    assert {r.framework for r in load_phase_csv(path)} == {UNNAMED}
    book = PhaseBook([*load_splitwise(), *rows], framework="tensorrt-llm 0.x")
    assert {k[1] for k in book.fitted} == {"H100-SXM"}
    own = book.get("llama2-70b", "H100-SXM", 4)
    assert own.stack == "TensorRT-LLM 0.x" and own.source == "measured"
    a100 = book.get("llama2-70b", "A100-80GB", 4)
    assert a100.stack == "TensorRT-LLM 0.x" and a100.source == "transferred from H100-SXM"
    base = default_book().get("llama2-70b", "H100-SXM", 4)
    assert float(own.decode_s(8, 1000)) == pytest.approx(0.6 * float(base.decode_s(8, 1000)),
                                                         rel=0.05)
    plan = plan_split("llama2-70b", shipped_trace("conv").head(2000), load_fleet("mixed"),
                      SLO.parse("ttft_p90=2s,tpot_p90=150ms"), book=book)
    assert plan.stack == "TensorRT-LLM 0.x"
    with pytest.raises(LLMInputError, match=r"^--framework 'sglang': no phase rows of that "
                                            r"stack \(rows name: TensorRT-LLM 0.x, "
                                            r"splitwise-2023\)"):
        PhaseBook([*load_splitwise(), *rows], framework="sglang")


def test_framework_column_and_cli(tmp_path) -> None:
    path = _faster_h100(tmp_path, "vllm-0.6-test")
    assert {r.framework for r in load_phase_csv(path, framework="ignored")} == {"vllm-0.6-test"}
    runner = CliRunner()
    out = runner.invoke(main, ["llm", "phases", "--phase-data", str(path),
                               "--framework", "vllm-0.6-test"])
    assert out.exit_code == 0, out.output
    assert "[vllm-0.6-test]" in out.output and "[splitwise-2023]" not in out.output
    out = runner.invoke(main, ["llm", "phases"])
    assert out.exit_code == 0 and "stack splitwise-2023 (vLLM of mid-2023" in out.output
    out = runner.invoke(main, ["llm", "plan", "--model", "llama2-70b", "--trace", "conv",
                               "--fleet", "mixed", "--slo", "ttft_p90=2s,tpot_p90=150ms",
                               "--framework", "nope"])
    assert out.exit_code == 1
    assert out.output.strip() == ("error: --framework 'nope': no phase rows of that stack "
                                  "(rows name: splitwise-2023); give your rows with "
                                  "--phase-data, or name one of those")
