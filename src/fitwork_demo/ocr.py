"""The OCR work in stages, over the ONNX models that ship inside rapidocr-onnxruntime 1.4.4.

::

    fetch ─▶ decode ─▶ detect (ONNX: PP-OCRv4 det) ─▶ crop ─▶ recognise (ONNX: PP-OCRv4 rec,
    GET        PNG to     text boxes                  one image    batched) ─▶ lines ─▶ store
    the page   BGR pixels                             per box                          PUT the text

`ocr_document` runs every stage for one page: the monolithic function.  The fitted units in
``layouts`` call the same stage functions, so both give the same text.  Recognition makes
each crop's input from the crop alone (48 pixels high, its width rounded up to a multiple
of ``WIDTH_STEP``), then batches crops of equal width: a crop is read the same way whatever
else shares its batch.  Every ONNX Runtime session runs one thread (one process, one
core); with ``GPU_ENV`` set to 1 they run on the CUDAExecutionProvider (onnxruntime-gpu),
onnxruntime falling back to the CPU where CUDA cannot start.
Nothing is downloaded: the models are files in the wheel.
"""

from __future__ import annotations

import functools
import io
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from fitwork_demo.server import get_document, put_text

GPU_ENV = "FITWORK_DEMO_GPU"
DET_LIMIT = 960
REC_HEIGHT = 48
WIDTH_STEP = 32
MIN_WIDTH = 64
REC_BATCH = 16
TEXT_SCORE = 0.5

Box = np.ndarray
"""Four corners of a text box, (4, 2) float32: top-left, top-right, bottom-right, bottom-left."""


def model_paths() -> dict[str, str]:
    """The detection and recognition ONNX files inside the installed rapidocr wheel."""
    from rapidocr_onnxruntime.main import DEFAULT_CFG_PATH
    from rapidocr_onnxruntime.utils import read_yaml, update_model_path

    config = update_model_path(read_yaml(DEFAULT_CFG_PATH))
    return {"detect": config["Det"]["model_path"], "recognise": config["Rec"]["model_path"]}


CUDA_OPTIONS = {"device_id": 0, "arena_extend_strategy": "kSameAsRequested",
                "cudnn_conv_algo_search": "HEURISTIC"}
"""CUDA provider options: a heuristic convolution algorithm per input shape, since every
crop width is a new shape (rapidocr's own choice, an exhaustive search, would time each)."""


def cuda_session(path: str) -> Any:
    """A single-threaded session of the model at ``path`` on the CUDA provider (CPU behind)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=[
        ("CUDAExecutionProvider", CUDA_OPTIONS), "CPUExecutionProvider"])


class Models:
    """rapidocr's text detector and recogniser, one single-threaded session each.

    ``detect`` and ``recognise`` say which of the two to load (a unit that runs one model
    holds only that one).  With ``gpu`` the sessions rapidocr builds are swapped for
    `cuda_session` ones (same models, same inputs and outputs); ``providers`` says what the
    loaded sessions run on.
    """

    def __init__(self, gpu: bool = False, *, detect: bool = True, recognise: bool = True
                 ) -> None:
        import cv2
        from rapidocr_onnxruntime.ch_ppocr_det import TextDetector
        from rapidocr_onnxruntime.ch_ppocr_rec import TextRecognizer
        from rapidocr_onnxruntime.main import DEFAULT_CFG_PATH
        from rapidocr_onnxruntime.utils import read_yaml, update_model_path

        cv2.setNumThreads(1)
        config = update_model_path(read_yaml(DEFAULT_CFG_PATH))
        session = {"intra_op_num_threads": 1, "inter_op_num_threads": 1}
        self.detector: Any = None
        self.rec_session: Any = None
        self.decode_text: Any = None
        self.providers: list[str] = []
        if detect:
            self.detector = TextDetector({**config["Det"], **session, "limit_type": "max",
                                          "limit_side_len": DET_LIMIT})
            if gpu:
                self.detector.infer.session = cuda_session(config["Det"]["model_path"])
            self.providers = list(self.detector.infer.session.get_providers())
        if recognise:
            recogniser = TextRecognizer({**config["Rec"], **session})
            if gpu:
                recogniser.session.session = cuda_session(config["Rec"]["model_path"])
            self.rec_session = recogniser.session
            self.decode_text = recogniser.postprocess_op
            self.providers = list(self.rec_session.session.get_providers())

    def detect(self, image: np.ndarray) -> list[Box]:
        """Text boxes on ``image``, top to bottom, then left to right."""
        if self.detector is None:
            raise RuntimeError("these models were loaded without the detector")
        boxes, _ = self.detector(image)
        if boxes is None or len(boxes) == 0:
            return []
        return sorted((np.asarray(b, dtype=np.float32) for b in boxes),
                      key=lambda b: (float(b[:, 1].mean()), float(b[:, 0].min())))

    def recognise(self, crops: Sequence[np.ndarray]) -> list[tuple[str, float]]:
        """(text, score) for each crop; crops of equal padded width share a batch."""
        if self.rec_session is None:
            raise RuntimeError("these models were loaded without the recogniser")
        inputs = [recognition_input(c) for c in crops]
        by_width: dict[int, list[int]] = {}
        for index, tensor in enumerate(inputs):
            by_width.setdefault(tensor.shape[-1], []).append(index)
        results: list[tuple[str, float]] = [("", 0.0)] * len(crops)
        for indices in by_width.values():
            for start in range(0, len(indices), REC_BATCH):
                chunk = indices[start:start + REC_BATCH]
                batch = np.stack([inputs[i] for i in chunk])
                decoded = self.decode_text(self.rec_session(batch)[0])
                for index, (text, score) in zip(chunk, decoded, strict=True):
                    results[index] = (str(text), float(score))
        return results


@functools.cache
def process_models(detect: bool = True, recognise: bool = True) -> Models:
    """This process's models (both, or the one asked for), loaded on first use, on the GPU
    when ``GPU_ENV`` is 1."""
    return Models(gpu=os.environ.get(GPU_ENV) == "1", detect=detect, recognise=recognise)


def decode(png: bytes) -> np.ndarray:
    """A PNG as BGR pixels, (H, W, 3) uint8, as the models expect."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        rgb = np.asarray(image.convert("RGB"))
    return np.ascontiguousarray(rgb[:, :, ::-1])


def crop(image: np.ndarray, boxes: Sequence[Box]) -> list[np.ndarray]:
    """Each box cut out and straightened (a perspective warp to an upright rectangle)."""
    import cv2

    crops = []
    for box in boxes:
        width = max(1, int(max(np.linalg.norm(box[0] - box[1]), np.linalg.norm(box[2] - box[3]))))
        height = max(1, int(max(np.linalg.norm(box[0] - box[3]),
                                np.linalg.norm(box[1] - box[2]))))
        target = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
        matrix = cv2.getPerspectiveTransform(box.astype(np.float32), target)
        piece = cv2.warpPerspective(image, matrix, (width, height),
                                    borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
        if piece.shape[0] >= 1.5 * piece.shape[1]:
            piece = np.ascontiguousarray(np.rot90(piece))
        crops.append(piece)
    return crops


def recognition_input(piece: np.ndarray) -> np.ndarray:
    """One crop as the recogniser takes it: (3, 48, W) float32 in [-1, 1], zero-padded right.

    W is the crop's width at 48 pixels high, rounded up to a multiple of ``WIDTH_STEP``
    (at least ``MIN_WIDTH``), so the input depends on the crop alone.
    """
    import cv2

    height, width = piece.shape[:2]
    resized_width = max(1, math.ceil(REC_HEIGHT * width / height))
    padded = max(MIN_WIDTH, -(-resized_width // WIDTH_STEP) * WIDTH_STEP)
    resized = cv2.resize(piece, (resized_width, REC_HEIGHT)).astype(np.float32)
    tensor = np.zeros((3, REC_HEIGHT, padded), dtype=np.float32)
    tensor[:, :, :resized_width] = resized.transpose(2, 0, 1) / 127.5 - 1.0
    return tensor


def layout_lines(boxes: Sequence[Box], results: Sequence[tuple[str, float]]) -> list[str]:
    """The page's lines: confident boxes grouped by height on the page, joined left to right.

    A box joins the line above when its centre lies within that line's first box, top to
    bottom; boxes whose text scores under ``TEXT_SCORE`` (or is empty) are dropped.
    """
    lines: list[tuple[float, float, list[tuple[float, str]]]] = []
    for box, (text, score) in zip(boxes, results, strict=True):
        text = text.strip()
        if score < TEXT_SCORE or not text:
            continue
        top, bottom = float(box[:, 1].min()), float(box[:, 1].max())
        centre = (top + bottom) / 2
        if lines and lines[-1][0] <= centre <= lines[-1][1]:
            lines[-1][2].append((float(box[:, 0].min()), text))
        else:
            lines.append((top, bottom, [(float(box[:, 0].min()), text)]))
    return [" ".join(text for _, text in sorted(words)) for _, _, words in lines]


def read_page(models: Models, png: bytes) -> tuple[list[Box], list[np.ndarray]]:
    """Decode, detect and crop one page: its boxes and their crops."""
    image = decode(png)
    boxes = models.detect(image)
    return boxes, crop(image, boxes)


def ocr_document(item: dict[str, Any]) -> dict[str, Any]:
    """OCR one page from start to end: the monolithic function, as one would write it.

    The models are looked up where they are used rather than held in a local, so that
    ``fitwork.decomposition`` can cut between the statements (sessions cannot be pickled).
    """
    png = get_document(item["id"])
    boxes, crops = read_page(process_models(), png)
    lines = layout_lines(boxes, process_models().recognise(crops))
    put_text(item["id"], lines)
    return {"id": item["id"], "lines": lines}
