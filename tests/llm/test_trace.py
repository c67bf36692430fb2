"""Traces: the Azure loader, malformed rows, rate scaling, the length summary."""

from __future__ import annotations

import numpy as np
import pytest

from fitwork.llm.phases import LLMInputError
from fitwork.llm.trace import load_azure, poisson_trace, shipped_trace


def test_shipped_traces_load_whole() -> None:
    conv, code = shipped_trace("conv"), shipped_trace("code")
    assert (len(conv), len(code)) == (19_366, 8_819)
    assert np.all(np.diff(conv.arrival) >= 0) and conv.arrival[0] == 0
    s = conv.summary()
    assert s["prompt_p50"] == 1020 and s["output_p50"] == 129
    assert 3400 < s["duration_s"] < 3600


def test_malformed_row_names_file_and_line(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.6805900,374,44\n"
                    "2023-11-16 18:15:50.9951690,39x,109\n")
    with pytest.raises(LLMInputError, match=rf"^{path}:3: token counts '39x', '109' are not"):
        load_azure(path)
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n")
    with pytest.raises(LLMInputError, match=rf"^{path}:2: TIMESTAMP 'yesterday'"):
        load_azure(path)
    path.write_text("time,prompt,output\n")
    with pytest.raises(LLMInputError, match=rf"^{path}:1: header must be"):
        load_azure(path)


def test_scaling_and_superposing_the_rate() -> None:
    conv = shipped_trace("conv")
    fast = conv.scaled(4)
    assert fast.rate == pytest.approx(4 * conv.rate)
    assert np.array_equal(fast.prompt, conv.prompt)
    many = conv.head(1000).superposed(3, seed=1)
    assert len(many) == 3000 and many.duration <= conv.head(1000).duration
    assert np.all(np.diff(many.arrival) >= 0)
    with pytest.raises(LLMInputError):
        conv.scaled(0)


def test_burstiness() -> None:
    steady = poisson_trace(50.0, 50_000, 100, 10, seed=0)
    assert 1.0 <= steady.burstiness() < 1.1
    assert shipped_trace("conv").burstiness() == pytest.approx(1.53, abs=0.01)
    assert shipped_trace("code").burstiness() > 3
