"""PyTorch units are counted too: FLOPs by torch's counter, device bytes by operator traffic."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from fitwork.profiling.torch_count import count


def test_without_torch_loaded_nothing_is_counted() -> None:
    if "torch" in sys.modules:
        pytest.skip("torch is loaded in this process")
    assert count(lambda batch: batch, [1, 2]) == (None, None)


def test_a_linear_layer_counts_its_flops_and_reads_its_weights() -> None:
    torch = pytest.importorskip("torch")
    layer = torch.nn.Linear(256, 512, bias=False)

    def call(batch: list[Any]) -> list[Any]:
        return list(layer(torch.stack(batch)))

    batch = [torch.randn(256) for _ in range(4)]
    flops, nbytes = count(call, batch)
    assert flops == pytest.approx(2 * 256 * 512)  # per item
    weights = 256 * 512 * 4
    # per item: the weights read once per call over 4 items, plus its input and output
    assert nbytes is not None and nbytes >= weights / 4 + (256 + 512) * 4
