"""FLOPs per page, counted from the ONNX graphs as onnxruntime runs them on sample pages.

The ``onnx`` package is not among rapidocr's dependencies, so the graphs are read through
onnxruntime's own profiler instead, with the library's counting
(`fitwork.profiling.onnx`): sessions with graph optimizations off (the graph as shipped, no
fused kernels) report, for every node they run, the op type and the shapes of its inputs
(weights included) and outputs, and Conv, ConvTranspose, MatMul and Gemm are counted as two
FLOPs per multiply-accumulate.  Elementwise ops, pooling, normalisation and activations are
not counted, so the figure is a slight undercount.  Recognition FLOPs include the zero
padding of each crop's input.  The counting runs in a forked child, so this process never
starts an onnxruntime session before it forks workers.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fitwork.forked import ChildFailed, run_forked
from fitwork.profiling.onnx import profile_flops, profiling_options, session_events
from fitwork_demo.layouts import Flops

SAMPLE_PAGES = 6


def _profiled_session(path: str, prefix: Path) -> Any:
    import onnxruntime as ort

    options = profiling_options(prefix, threads=1)
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def count_here(pages: Sequence[bytes]) -> Flops:
    """Mean FLOPs per page of detection and of recognition over ``pages`` (in this process)."""
    from fitwork_demo.ocr import Models, decode, model_paths, read_page, recognition_input

    if not pages:
        return Flops()
    models = Models()
    paths = model_paths()
    with tempfile.TemporaryDirectory(prefix="fitwork-flops-") as folder:
        detect = _profiled_session(paths["detect"], Path(folder) / "detect")
        recognise = _profiled_session(paths["recognise"], Path(folder) / "recognise")
        for png in pages:
            image = decode(png)
            tensor = models.detector.get_preprocess(max(image.shape[:2]))(image)
            detect.run(None, {detect.get_inputs()[0].name: tensor})
            _, crops = read_page(models, png)
            for piece in crops:
                batch = recognition_input(piece)[None]
                recognise.run(None, {recognise.get_inputs()[0].name: batch})
        totals = [profile_flops(session_events(session)) for session in (detect, recognise)]
    return Flops(detect=totals[0] / len(pages), recognise=totals[1] / len(pages))


def spread(pages: Sequence[bytes], count: int = SAMPLE_PAGES) -> list[bytes]:
    """``count`` pages spread evenly over ``pages`` (all of them when there are fewer)."""
    count = min(count, len(pages))
    return [pages[i * len(pages) // count] for i in range(count)]


def count(pages: Sequence[bytes]) -> Flops:
    """`count_here` on `spread` pages, in a forked child; ``RuntimeError`` if it fails."""
    try:
        payload = run_forked(count_here, spread(pages))
    except ChildFailed as failure:
        raise RuntimeError(f"counting FLOPs: {failure}") from None
    result: Flops = payload
    return result
