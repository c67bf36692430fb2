"""FLOPs per page, counted from the ONNX graphs as onnxruntime runs them on sample pages.

The ``onnx`` package is not among rapidocr's dependencies, so the graphs are read through
onnxruntime's own profiler instead, with the library's counting (`fitwork.count_onnx`):
sessions created inside it run with graph optimizations off (the graph as shipped, no fused
kernels) and report, for every node they run, the op type and the shapes of its inputs
(weights included) and outputs, and Conv, ConvTranspose, MatMul and Gemm are counted as two
FLOPs per multiply-accumulate.  Elementwise ops, pooling, normalisation and activations are
not counted, so the figure is a slight undercount.  Recognition FLOPs include the zero
padding of each crop's input.  The counting runs in a forked child, so this process never
starts an onnxruntime session before it forks workers.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from fitwork import count_onnx
from fitwork_demo.layouts import Flops

SAMPLE_PAGES = 6


def _counted(path: str, inputs: Sequence[Any]) -> float:
    """FLOPs of running the model at ``path`` once on each of ``inputs`` (one thread, CPU)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    with count_onnx() as counted:
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        for tensor in inputs:
            session.run(None, {name: tensor})
        return counted.read().flops


def count_here(pages: Sequence[bytes]) -> Flops:
    """Mean FLOPs per page of detection and of recognition over ``pages`` (in this process)."""
    from fitwork_demo.ocr import Models, decode, model_paths, read_page, recognition_input

    if not pages:
        return Flops()
    models = Models()  # rapidocr's own sessions, made before counting: they are not counted
    paths = model_paths()
    images = [decode(png) for png in pages]
    detect_inputs = [models.detector.get_preprocess(max(image.shape[:2]))(image)
                     for image in images]
    recognise_inputs = [recognition_input(piece)[None] for png in pages
                        for piece in read_page(models, png)[1]]
    detect = _counted(paths["detect"], detect_inputs)
    recognise = _counted(paths["recognise"], recognise_inputs)
    return Flops(detect=detect / len(pages), recognise=recognise / len(pages))


def spread(pages: Sequence[bytes], count: int = SAMPLE_PAGES) -> list[bytes]:
    """``count`` pages spread evenly over ``pages`` (all of them when there are fewer)."""
    count = min(count, len(pages))
    return [pages[i * len(pages) // count] for i in range(count)]


def count(pages: Sequence[bytes]) -> Flops:
    """`count_here` on `spread` pages, in a forked child; ``RuntimeError`` if it fails."""
    fork = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=fork) as child:
            result: Flops = child.submit(count_here, spread(pages)).result()
    except Exception as failure:  # raised in the child, or the child died
        raise RuntimeError(f"counting FLOPs: {type(failure).__name__}: {failure}") from None
    return result
