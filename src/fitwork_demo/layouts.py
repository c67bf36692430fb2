"""The OCR work as pipelines, and the layouts the demo runs them in.

::

    monolithic   ocr_document                              (one unit: every stage, per page)
    threaded     ocr_document fused with io=N              (N pages in flight per process)
    split        fetch ─▶ detect (decode, detect, crop) ─▶ recognise (batched) ─▶ store

A `Layout` is one way of running the pages on this host: the monolith as N processes, the
threaded monolith as P processes of N threads (``Pipeline.fused(io=N)``: it overlaps its
own waiting on the store), the split units at replica counts a person picks by hand, or
the split units as the plan fits them.  ``fetch`` and ``store`` wait on the store: I/O
units with ``IO_CONCURRENCY`` calls in flight that hold ``IO_CPU`` of a core.  A model
unit holds one core (its sessions run one thread) and loads only its own model; with
``gpu`` it holds a GPU share as well (the monolithic unit a whole GPU, as a container is
given one).  ``flops`` are FLOPs per page (see ``flops``), declared on the units so that
plans and run records carry model-FLOPs utilization.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fitwork import Pipeline, unit
from fitwork_demo.ocr import Models, layout_lines, ocr_document, process_models, read_page
from fitwork_demo.server import get_document, put_text

IO_CONCURRENCY = 8
IO_CPU = 0.1
RECOGNISE_BATCH = 16
SPLIT_GPU_SHARE = 0.25
"""GPU share of a model unit on a GPU host: a fraction, so that several replicas overlap
their host work (decoding, cropping) with one another's model calls on one GPU."""
MONOLITHIC = "ocr_document"
THREADED = "ocr_threaded"
MODEL_UNITS = ("detect", "recognise")

Family = Literal["monolith", "hand", "fitted", "adapted"]


def fetch(item: dict[str, Any]) -> dict[str, Any]:
    """Read the page's PNG from the store."""
    return {"id": item["id"], "png": get_document(item["id"])}


def store(item: dict[str, Any]) -> dict[str, Any]:
    """Write the page's lines to the store; pass them on."""
    put_text(item["id"], item["lines"])
    return {"id": item["id"], "lines": item["lines"]}


class OcrDocument:
    """`ocr_document` as a container runs it: the models loaded when it starts."""

    def __init__(self) -> None:
        process_models()

    def __call__(self, item: dict[str, Any]) -> dict[str, Any]:
        return ocr_document(item)


class Detect:
    """Decode, detect and crop one page: its boxes and crops go on to recognition."""

    def __init__(self) -> None:
        self.models: Models = process_models(detect=True, recognise=False)

    def __call__(self, item: dict[str, Any]) -> dict[str, Any]:
        boxes, crops = read_page(self.models, item["png"])
        return {"id": item["id"], "boxes": boxes, "crops": crops}


class Recognise:
    """Recognise the crops of a batch of pages together; lay out each page's lines."""

    def __init__(self) -> None:
        self.models: Models = process_models(detect=False, recognise=True)

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
    return Pipeline(unit(OcrDocument, name=MONOLITHIC, cpu=1.0, gpu=1.0 if gpu else 0.0,
                         flops=flops.page), name="ocr-monolithic")


def threaded(flops: Flops, io: int, gpu: bool = False) -> Pipeline:
    """The monolith with ``io`` pages in flight per process (``Pipeline.fused(io=...)``)."""
    return monolithic(flops, gpu).fused(name=THREADED, io=io)


def split(flops: Flops, gpu: bool = False, batch_size: int = RECOGNISE_BATCH) -> Pipeline:
    """Fetch, detection, batched recognition and store, each its own unit."""
    share = SPLIT_GPU_SHARE if gpu else 0.0
    detect = unit(Detect, name="detect", cpu=1.0, gpu=share, flops=flops.detect)
    recognise = unit(Recognise, name="recognise", cpu=1.0, gpu=share,
                     batch_size=batch_size, flops=flops.recognise)
    return Pipeline(_io(fetch, "fetch"), detect, recognise, _io(store, "store"),
                    name="ocr-split")


@dataclass
class Layout:
    """One way of running the pages: a pipeline and how many replicas of what.

    ``placement`` is what `fitwork.run` takes (a plan for the fitted layout, else ``None``
    and ``workers`` gives the counts); ``adapt`` re-fits the plan while it runs.
    ``predicted`` is the plan's steady items/s for this layout where the plan states one,
    and ``predicted_run`` what it predicts for a run of the trial's pages (its replicas'
    start-up and the first page's way through included: `fitwork.Plan.run_rate`).
    """

    key: str
    family: Family
    title: str
    config: str
    pipeline: Pipeline
    workers: dict[str, int] = field(default_factory=dict)
    placement: Any = None
    adapt: bool = False
    predicted: float | None = None
    predicted_run: float | None = None
    note: str = ""

    @property
    def processes(self) -> int:
        """Worker processes the layout starts (before any re-fit)."""
        if self.placement is not None:
            return sum(self.placement.placement().counts().values())
        return sum(self.workers.get(u.name, u.replicas) for u in self.pipeline.units)


def flops_per_item(pipeline: Pipeline, flops: Flops) -> Mapping[str, float]:
    """FLOPs per item of each unit of ``pipeline`` (the fused units' from the page's)."""
    found = {u.name: float(u.flops) for u in pipeline.units
             if isinstance(u.flops, int | float) and u.flops}
    for u in pipeline.units:
        if u.name not in found and u.name in (THREADED, "monolithic") and flops.page:
            found[u.name] = flops.page
    return found
