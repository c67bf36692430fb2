"""The OCR work as pipelines: the monolithic unit, and two ways to cut it into units.

::

    monolithic   ocr_document                                    (one unit: every stage)
    joint        fetch ─▶ ocr (decode, detect, crop, recognise; batched) ─▶ store
    split        fetch ─▶ detect (decode, detect, crop) ─▶ recognise (batched) ─▶ store

The units are explicit rather than made by ``fitwork.decomposition``, though ``decompose``
of ``ocr_document`` cuts it where ``joint`` does (fetch, models, store): recognition here
is batched across pages (a decomposed unit takes one item), and the model units ask for a
GPU only on a host that has one (a ``# fitwork: gpu`` hint is fixed in the source).
``fetch`` and ``store`` wait on the store: I/O units with ``IO_CONCURRENCY`` calls in
flight that hold ``IO_CPU`` of a core.  A model unit holds one core (its sessions run one
thread), and with ``gpu`` a GPU share as well (the monolithic unit a whole GPU, as a
container is given one).  ``flops`` are FLOPs per page (see ``flops``), declared on the
units so that plans and run records carry model-FLOPs utilization.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fitwork.demo.ocr import Models, layout_lines, ocr_document, process_models, read_page
from fitwork.demo.server import get_document, put_text
from fitwork.workload import Pipeline, unit

IO_CONCURRENCY = 8
IO_CPU = 0.1
OCR_BATCH = 8
RECOGNISE_BATCH = 16
JOINT_GPU_SHARE = 0.5
SPLIT_GPU_SHARE = 0.25
"""GPU shares on a GPU host: fractions, so that several replicas overlap their host work
(decoding, cropping) with one another's model calls on one GPU."""
MONOLITHIC = "ocr_document"


def fetch(item: dict[str, Any]) -> dict[str, Any]:
    """Read the page's PNG from the store."""
    return {"id": item["id"], "png": get_document(item["id"])}


def store(item: dict[str, Any]) -> dict[str, Any]:
    """Write the page's lines to the store; pass them on."""
    put_text(item["id"], item["lines"])
    return {"id": item["id"], "lines": item["lines"]}


class Ocr:
    """Decode, detect and crop each page of a batch; recognise all their crops together."""

    def __init__(self) -> None:
        self.models: Models = process_models()

    def __call__(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pages = [read_page(self.models, item["png"]) for item in batch]
        results = self.models.recognise([c for _, crops in pages for c in crops])
        out, start = [], 0
        for item, (boxes, crops) in zip(batch, pages, strict=True):
            mine = results[start:start + len(crops)]
            start += len(crops)
            out.append({"id": item["id"], "lines": layout_lines(boxes, mine)})
        return out


class Detect:
    """Decode, detect and crop one page: its boxes and crops go on to recognition."""

    def __init__(self) -> None:
        self.models: Models = process_models()

    def __call__(self, item: dict[str, Any]) -> dict[str, Any]:
        boxes, crops = read_page(self.models, item["png"])
        return {"id": item["id"], "boxes": boxes, "crops": crops}


class Recognise:
    """Recognise the crops of a batch of pages together; lay out each page's lines."""

    def __init__(self) -> None:
        self.models: Models = process_models()

    def __call__(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        results = self.models.recognise([c for item in batch for c in item["crops"]])
        out, start = [], 0
        for item in batch:
            mine = results[start:start + len(item["crops"])]
            start += len(item["crops"])
            out.append({"id": item["id"], "lines": layout_lines(item["boxes"], mine)})
        return out


@dataclass(frozen=True)
class Flops:
    """FLOPs per page of the two models (``None``: not counted)."""

    detect: float | None = None
    recognise: float | None = None

    @property
    def page(self) -> float | None:
        """Both models, per page."""
        if self.detect is None or self.recognise is None:
            return None
        return self.detect + self.recognise


def _io(fn: Any, name: str) -> Any:
    return unit(fn, name=name, io=IO_CONCURRENCY, cpu=IO_CPU)


def monolithic(flops: Flops, gpu: bool = False) -> Pipeline:
    """Every stage in one unit, as one container runs it; a GPU host gives it a whole GPU."""
    return Pipeline(unit(ocr_document, name=MONOLITHIC, cpu=1.0, gpu=1.0 if gpu else 0.0,
                         flops=flops.page), name="ocr-monolithic")


def joint(flops: Flops, gpu: bool = False) -> Pipeline:
    """Fetch and store apart; both models in one batched unit."""
    ocr = unit(Ocr, name="ocr", cpu=1.0, gpu=JOINT_GPU_SHARE if gpu else 0.0,
               batch_size=OCR_BATCH,
               flops=flops.page)
    return Pipeline(_io(fetch, "fetch"), ocr, _io(store, "store"), name="ocr-joint")


def split(flops: Flops, gpu: bool = False) -> Pipeline:
    """Fetch, detection, batched recognition and store, each its own unit."""
    share = SPLIT_GPU_SHARE if gpu else 0.0
    detect = unit(Detect, name="detect", cpu=1.0, gpu=share, flops=flops.detect)
    recognise = unit(Recognise, name="recognise", cpu=1.0, gpu=share,
                     batch_size=RECOGNISE_BATCH, flops=flops.recognise)
    return Pipeline(_io(fetch, "fetch"), detect, recognise, _io(store, "store"),
                    name="ocr-split")


LAYOUTS = {"split": split, "joint": joint}
"""Fitted layouts, finest first."""


def model_units(pipeline: Pipeline) -> list[str]:
    """Units of ``pipeline`` that run a model (those that may hold a GPU)."""
    return [u.name for u in pipeline.units if u.name in ("ocr", "detect", "recognise",
                                                          MONOLITHIC)]


def flops_per_item(pipeline: Pipeline) -> Mapping[str, float]:
    """FLOPs per item of each unit that declares them."""
    return {u.name: float(u.flops) for u in pipeline.units
            if isinstance(u.flops, int | float) and u.flops}
