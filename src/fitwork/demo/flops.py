"""FLOPs per page, counted from the ONNX graphs as onnxruntime runs them on sample pages.

The ``onnx`` package is not among rapidocr's dependencies, so the graphs are read through
onnxruntime's own profiler instead: with graph optimizations off (the graph as shipped, no
fused kernels) it reports, for every node it runs, the op type and the shapes of its inputs
(weights included) and outputs.  Counted, as two FLOPs per multiply-accumulate::

    Conv            2 x prod(output) x prod(weight[1:])        (C_in/groups x kH x kW each)
    ConvTranspose   2 x prod(input)  x prod(weight[1:])        (C_out/groups x kH x kW each)
                    (the profiler leaves its prepacked weight out: then C_out from the
                    output, one group, and a kernel the size of the stride, output/input
                    per spatial axis, as the detector's 2x2 stride-2 upsampling has)
    MatMul          2 x prod(output) x input_a[-1]
    Gemm            2 x prod(output) x prod(input_a) / output[0]

Elementwise ops, pooling, normalisation and activations are not counted, so the figure is
a slight undercount.  Recognition FLOPs include the zero padding of each crop's input.  The
counting runs in a forked child, so this process never starts an onnxruntime session
before it forks workers.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fitwork.demo.layouts import Flops
from fitwork.forked import ChildFailed, run_forked

COUNTED_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
SAMPLE_PAGES = 6


def node_flops(op: str, inputs: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]]
               ) -> float:
    """FLOPs of one node run, from its op type and shapes (0 for ops not counted)."""
    if op not in COUNTED_OPS or not inputs or not outputs:
        return 0.0
    out = math.prod(outputs[0])
    if op == "ConvTranspose":
        if len(inputs) >= 2:
            return 2.0 * math.prod(inputs[0]) * math.prod(inputs[1][1:])
        x, y = inputs[0], outputs[0]
        if len(x) < 3 or len(x) != len(y):
            return 0.0
        kernel = math.prod(max(1, o // max(i, 1)) for i, o in zip(x[2:], y[2:], strict=True))
        return 2.0 * math.prod(x) * y[1] * kernel
    if len(inputs) < 2:
        return 0.0
    if op == "Conv":
        return 2.0 * out * math.prod(inputs[1][1:])
    if op == "MatMul":
        return 2.0 * out * inputs[0][-1]
    rows = outputs[0][0] if outputs[0] else 1
    return 2.0 * out * math.prod(inputs[0]) / max(rows, 1)


def _shapes(entries: Iterable[dict[str, list[int]]]) -> list[list[int]]:
    return [next(iter(entry.values()), []) for entry in entries]


def profile_flops(events: Iterable[dict[str, Any]]) -> float:
    """Total FLOPs of the node runs in an onnxruntime profile (its JSON events)."""
    total = 0.0
    for event in events:
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith("_kernel_time"):
            continue
        args = event.get("args", {})
        total += node_flops(str(args.get("op_name", "")),
                            _shapes(args.get("input_type_shape", [])),
                            _shapes(args.get("output_type_shape", [])))
    return total


def _profiled_session(path: str, prefix: Path) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.enable_profiling = True
    options.profile_file_prefix = str(prefix)
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def count_here(pages: Sequence[bytes]) -> Flops:
    """Mean FLOPs per page of detection and of recognition over ``pages`` (in this process)."""
    from fitwork.demo.ocr import Models, decode, model_paths, read_page, recognition_input

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
        totals = []
        for session in (detect, recognise):
            events = json.loads(Path(session.end_profiling()).read_text())
            totals.append(profile_flops(events))
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
