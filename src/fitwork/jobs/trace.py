"""Build the shipped pipeline trace from Gavel's Philly traces and throughput matrix.

One pipeline per Philly job (the four virtual clusters Gavel ships, each a team): arrival
time as in the trace; items = total steps x scale factor (per-GPU batches: the job's steps
at its requested GPUs, carried by replicas of one GPU each); ``max_gpus`` = the scale factor
(the GPUs the job asked for: a pipeline holds at most that many at once, as Gavel runs a job
on its requested GPUs); three units:

- ``pre`` (CPU): the job family's input preparation, ``PRE_SAMPLES_PER_CORE`` samples/s per
  core (ASSUMED, see the data README), so ``/ batch`` items/s per one-core replica;
- ``model`` (GPU, one device per replica): Gavel's measured alone throughput at scale 1 on
  K80, P100, V100 (steps/s = items/s); T4 and A100-40GB TRANSFERRED from V100 by the
  catalog's fp32 peak ratio (compute-bound roofline; Gavel's jobs train in fp32);
- ``post`` (CPU): ``POST_ITEMS_PER_CORE`` items/s per core (ASSUMED): metrics and output.

Deterministic: no random draw; the same inputs give the same file byte for byte.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from fitwork.hardware.catalog import DeviceClass, catalog

CPU_CLASS = "cpu-x86"
MEASURED = ("K80", "P100", "V100")
TRANSFERRED = ("T4", "A100-40GB")
PRE_SAMPLES_PER_CORE: dict[str, float] = {
    "ResNet-50": 100.0,       # ImageNet JPEG decode, random-resized crop, flip
    "ResNet-18": 4000.0,      # CIFAR-10 32x32 arrays in memory, crop and flip
    "CycleGAN": 40.0,         # 256x256 JPEG pairs, resize and crop
    "Transformer": 20000.0,   # Multi30k, pre-tokenised, padding into batches
    "LM": 50000.0,            # Wikitext-2 token windows
    "Recommendation": 20000.0,  # ML-20M sparse user rows to dense
    "A3C": 50.0,              # Atari Pong emulator steps for one rollout batch
}
"""ASSUMED input-preparation rates (samples/s per core); not measured here."""
POST_ITEMS_PER_CORE = 2000.0
"""ASSUMED output/metrics rate (items/s per core)."""
PRE_MEMORY = 2 * 2**30
POST_MEMORY = 2**30
MODEL_MEMORY = 4 * 2**30
TRACES = ("0e4a51", "2869ce", "51b7ef", "7f04ca")


def _family(job_type: str) -> tuple[str, int]:
    """(family, batch size) of a Gavel job type, e.g. ('ResNet-50', 64)."""
    found = re.match(r"(.+?) \(batch size (\d+)\)$", job_type)
    return (found.group(1), int(found.group(2))) if found else (job_type, 1)


def _fp32(device: DeviceClass) -> float:
    """A class's fp32 peak FLOP/s (the roofline's compute-bound ratio takes two)."""
    if not device.fp32_flops:
        raise ValueError(f"{device.name}: the catalog has no fp32 peak")
    return float(device.fp32_flops)


def throughputs() -> dict[str, dict[str, float]]:
    """Job type -> device class -> steps/s alone at scale 1: measured, plus transferred."""
    source = resources.files("fitwork.fit").joinpath("data/gavel_throughputs_alone.csv")
    known = catalog()
    out: dict[str, dict[str, float]] = {}
    with source.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if int(row["scale"]) != 1:
                continue
            rates = {cls: float(row[cls.lower()]) for cls in MEASURED}
            for cls in TRANSFERRED:
                rates[cls] = rates["V100"] * _fp32(known.get(cls)) / _fp32(known.get("V100"))
            out[row["job"]] = rates
    return out


def _rows(gavel_dir: Path) -> Iterator[tuple[float, str, int, list[str]]]:
    """(arrival, trace, line, fields) of every job in the Philly traces."""
    for vc in TRACES:
        path = gavel_dir / f"philly_vc_{vc}.trace"
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            fields = text.split("\t")
            yield float(fields[5]), vc, line, fields


def pipeline(vc: str, line: int, fields: list[str],
             rates: dict[str, dict[str, float]]) -> dict[str, object]:
    """One trace line's pipeline (the JSON object written for it)."""
    job_type, steps, arrival, scale = fields[0], int(fields[4]), float(fields[5]), int(fields[6])
    family, batch = _family(job_type)
    pre = PRE_SAMPLES_PER_CORE[family] / batch
    model = {cls: round(rate, 6) for cls, rate in rates[job_type].items()}
    return {
        "id": f"{vc}-{line}", "team": f"vc-{vc}", "weight": 1.0, "arrival_s": arrival,
        "items": steps * scale, "job_type": job_type, "max_gpus": scale,
        "units": [
            {"name": "pre", "rates": {CPU_CLASS: round(pre, 6)}, "cpu": 1, "gpu": 0,
             "memory": PRE_MEMORY, "basis": "assumed"},
            {"name": "model", "rates": model, "cpu": 1, "gpu": 1, "memory": MODEL_MEMORY,
             "basis": {**{c: "measured" for c in MEASURED},
                       **{c: "transferred" for c in TRANSFERRED}}},
            {"name": "post", "rates": {CPU_CLASS: POST_ITEMS_PER_CORE}, "cpu": 1, "gpu": 0,
             "memory": POST_MEMORY, "basis": "assumed"},
        ],
    }


def build_trace(gavel_dir: Path, out: Path) -> int:
    """Write the pipeline trace (JSON lines, by arrival) from Gavel's Philly traces under
    ``gavel_dir``; returns how many pipelines it holds."""
    rates = throughputs()
    rows = sorted(_rows(gavel_dir), key=lambda r: (r[0], r[1], r[2]))
    with out.open("w", encoding="utf-8") as handle:
        for _, vc, line, fields in rows:
            handle.write(json.dumps(pipeline(vc, line, fields, rates), sort_keys=True) + "\n")
    return len(rows)


def shipped_trace() -> Path:
    """The trace built from the copies in ``fitwork/jobs/data`` (see its README)."""
    return Path(str(resources.files("fitwork.jobs").joinpath("data/philly_pipelines.jsonl")))


if __name__ == "__main__":  # python -m fitwork.jobs.trace: rebuild the shipped trace
    here = Path(str(resources.files("fitwork.jobs").joinpath("data")))
    print(build_trace(here, here / "philly_pipelines.jsonl"), "pipelines")
