"""fit_quality's trained shapes: the loopback service, the units, and each pipeline's Spec."""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import multiprocessing
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import heldout
import numpy as np
import seen
from bench_shape import Handler, ok_json, requested_number, start_loopback

from fitwork import Pipeline, unit

SERVICE_LATENCY_S = 0.020  # the loopback service's storage-like latency per request
PAYLOADS = 256  # distinct documents the service holds (item i gets document i % PAYLOADS)

# ---------------------------------------------------------------------------------------
# The loopback service the I/O-heavy pipeline calls (a forked process, started by main).

SERVICE_PORT = 0  # set by start_service before anything forks, so every worker inherits it
SERVICE_PIDS: list[int] = []  # the loopback services' processes, whose CPU counts as ours


def _documents() -> list[bytes]:
    """The service's documents: JSON objects of 384 floats each."""
    return [json.dumps({"id": n, "values": np.random.default_rng(n).normal(size=384).round(5)
                        .tolist()}).encode() for n in range(PAYLOADS)]


async def _answer(bodies: list[bytes], reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> None:
    """One connection: read ``GET /doc/N``, wait the latency, send document N, close."""
    try:
        body = bodies[await requested_number(reader) % len(bodies)]
        await asyncio.sleep(SERVICE_LATENCY_S)
        ok_json(writer, body)
        await writer.drain()
    except (ConnectionError, IndexError, ValueError):
        pass
    finally:
        writer.close()


def start_service() -> multiprocessing.process.BaseProcess:
    """Start the loopback service in its own process (a light one, since it shares the
    host's cores with the pipeline; its CPU is reported per request); sets
    `SERVICE_PORT`."""
    global SERVICE_PORT

    def handler() -> Handler:
        bodies = _documents()
        return lambda r, w: _answer(bodies, r, w)

    process, SERVICE_PORT = start_loopback(handler, "fit-service")
    return process


def start_services() -> list[multiprocessing.process.BaseProcess]:
    """Start every loopback service a bench pipeline calls (this file's, and the seen
    rate-limited one's), and write the files held-out file_read and sqlite_lookup read,
    before anything forks; the services' CPU is counted as this bench's."""
    heldout.file_read.prepare()  # its files, written once, before the workers fork
    heldout.sqlite_lookup.prepare()
    services = [start_service(), seen.rate_limited.start_service()]
    SERVICE_PIDS[:] = [p.pid for p in services if p.pid is not None]
    return services


def stop_services(services: Sequence[multiprocessing.process.BaseProcess]) -> None:
    """Terminate the services `start_services` started."""
    for process in services:
        process.terminate()
        process.join(5)


# ---------------------------------------------------------------------------------------
# 1. I/O-heavy, declared: fetch from a service (20 ms a call), parse JSON, score.

@unit(io=16)
def fetch(number: int) -> bytes:
    """One GET against the loopback service (a fresh connection, as a plain client makes)."""
    connection = http.client.HTTPConnection("127.0.0.1", SERVICE_PORT, timeout=30)
    try:
        connection.request("GET", f"/doc/{number}")
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise OSError(f"service answered {response.status}")
        return body
    finally:
        connection.close()


@unit(cpu=1)
def parse(body: bytes) -> np.ndarray:
    """Decode the document and normalise its values (about a millisecond of CPU)."""
    values = np.asarray(json.loads(body)["values"], dtype=np.float64)
    for _ in range(150):
        values = np.sin(values) + 0.5 * np.cos(values * 1.3)
    return values


@unit(cpu=1)
def score(values: np.ndarray) -> float:
    """A small summary of the document."""
    return float(np.abs(np.fft.rfft(values))[:16].sum())


# ---------------------------------------------------------------------------------------
# 2. CPU-heavy, declared: make an array, a few ms of numpy on it, reduce.

@unit(cpu=1)
def make(seed: int) -> np.ndarray:
    """A 16,384-float signal from a seed."""
    return np.random.default_rng(seed).standard_normal(16_384)


@unit(cpu=1)
def transform(signal: np.ndarray) -> np.ndarray:
    """The heavy stage: elementwise math and FFTs over the signal, a few ms."""
    for _ in range(16):
        signal = np.tanh(signal * 1.1) + np.sin(signal)
        signal = np.fft.irfft(np.fft.rfft(signal) * 0.99, n=signal.size)
    return signal


@unit(cpu=1)
def reduce_signal(signal: np.ndarray) -> float:
    """Sort and sum a subsample: well under a millisecond."""
    return float(np.sort(signal)[::128].sum())


# ---------------------------------------------------------------------------------------
# 3. A batched model unit: tokenize (pure Python), embed in batches of 16, pick a class.

VOCAB = [f"w{n}" for n in range(4096)]
WIDTH = 1024


@unit(cpu=1)
def tokenize(number: int) -> np.ndarray:
    """A 1,200-word text from a seed, hashed into a bag-of-words vector (pure Python)."""
    rng = np.random.default_rng(number)
    words = [VOCAB[k] for k in rng.integers(0, len(VOCAB), 1200)]
    vector = np.zeros(WIDTH, dtype=np.float32)
    for word in words:
        vector[hash(word) % WIDTH] += 1.0
    return vector / len(words)


class Embed:
    """Four dense layers (1024 x 1024, float32); weights built once per replica."""

    def __init__(self) -> None:
        rng = np.random.default_rng(7)
        self.layers = [rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) / WIDTH ** 0.5
                       for _ in range(4)]

    def __call__(self, batch: list[np.ndarray]) -> list[np.ndarray]:
        hidden = np.stack(batch)
        for weights in self.layers:
            hidden = np.maximum(hidden @ weights, 0.0)
        return list(hidden)


embed = unit(batch_size=16, batch_wait=0.05, name="embed")(Embed)


@unit(cpu=1)
def classify(hidden: np.ndarray) -> float:
    """The winning class's normalised score."""
    scores = np.exp(hidden[:64] - hidden[:64].max())
    return float(scores.max() / scores.sum())


# ---------------------------------------------------------------------------------------
# 4. A filter: generate, keep about a quarter after a cheap check, enrich what is kept.

@unit(cpu=1)
def draw(seed: int) -> np.ndarray:
    """A 4,096-float record from a seed."""
    return np.random.default_rng(seed).standard_normal(4096)


@unit(kind="filter", cpu=1)
def keep(record: np.ndarray) -> bool:
    """Keep records whose low-frequency energy is in the top quarter (about 25%)."""
    spectrum = np.abs(np.fft.rfft(record))
    return bool(spectrum[:64].sum() > 1.0485 * spectrum[64:128].sum())


@unit(cpu=1)
def enrich(record: np.ndarray) -> np.ndarray:
    """The expensive stage, on kept records only: repeated smoothing, several ms."""
    for _ in range(240):
        record = np.convolve(record, np.ones(9) / 9.0, mode="same")
        record = np.tanh(record * 2.0)
    return record


@unit(cpu=1)
def summarize(record: np.ndarray) -> float:
    """A norm."""
    return float(np.linalg.norm(record))


# ---------------------------------------------------------------------------------------
# 5. A flat-map: a document of eight paragraphs, split, each paragraph analysed.

WORDS = ("data", "model", "unit", "fit", "core", "queue", "batch", "rate", "plan", "node",
         "item", "stage", "cost", "time", "load", "share")


@unit(cpu=1)
def load_doc(number: int) -> list[str]:
    """Eight paragraphs of 200 words each, from a seed."""
    rng = np.random.default_rng(number)
    return [" ".join(WORDS[k] for k in rng.integers(0, len(WORDS), 200)) for _ in range(8)]


@unit(cpu=1)
def paragraphs(document: list[str]) -> Iterator[str]:
    """The flat-map: one output per paragraph."""
    yield from document


@unit(cpu=1)
def analyze(paragraph: str) -> float:
    """Word, bigram and character n-gram counts of a paragraph (pure Python, under a ms)."""
    words = paragraph.split()
    counts: dict[str, int] = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    pairs: dict[tuple[str, str], int] = {}
    for first, second in itertools.pairwise(words):
        pairs[first, second] = pairs.get((first, second), 0) + 1
    grams: dict[str, int] = {}
    for n in (3, 4, 5):
        for i in range(len(paragraph) - n + 1):
            gram = paragraph[i:i + n]
            grams[gram] = grams.get(gram, 0) + 1
    return max(counts.values()) + max(pairs.values()) + max(grams.values()) / len(grams)


# ---------------------------------------------------------------------------------------
# 6. Undeclared: plain @unit everywhere; a call that waits on a service (sleep), numpy, pack.

@unit
def lookup(number: int) -> dict[str, Any]:
    """Stands for a service call: 15 ms of waiting, then a small answer."""
    time.sleep(0.015)
    return {"id": number, "scale": 1.0 + (number % 7) / 10}


@unit
def crunch(answer: dict[str, Any]) -> np.ndarray:
    """A few ms of numpy on the answer."""
    values = np.random.default_rng(answer["id"]).standard_normal(8192) * answer["scale"]
    for _ in range(28):
        values = np.sqrt(np.abs(np.fft.irfft(np.fft.rfft(values), n=values.size))) - 0.5
    return values


@unit
def pack(values: np.ndarray) -> float:
    """A checksum of the result."""
    return float(values[::32].sum())


# ---------------------------------------------------------------------------------------
# Shapes written for issue 22 as a new user would write them (plain @unit, no declarations).
# Trained shapes all: sleep_io, batch_faster and blas_stages drove model changes since.

def _spin(seconds: float) -> None:
    """Keep this thread's CPU busy for ``seconds`` of its own CPU time (pure Python)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@unit
def tile(seed: int) -> np.ndarray:
    """A 256 x 256 float32 tile, normalised (numpy)."""
    values = np.random.default_rng(seed).standard_normal((256, 256), dtype=np.float32)
    return (values - values.mean()) / values.std()


PROJECTION = np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32) / 16


@unit
def project(values: np.ndarray) -> np.ndarray:
    """BLAS: the tile through a 256 x 256 projection, eight times."""
    for _ in range(8):
        values = np.tanh(values @ PROJECTION)
    return values


@unit
def tile_summary(values: np.ndarray) -> float:
    """A few figures of the tile, reduced to one."""
    return float(np.abs(values[::8, ::8]).mean())


@unit
def big_array(seed: int) -> np.ndarray:
    """A 384 x 384 float64 array: 1.2 MB, which crosses out of band."""
    return np.random.default_rng(seed).standard_normal((384, 384))


@unit
def standardise(values: np.ndarray) -> np.ndarray:
    """Light work on a large array."""
    return (values - values.mean()) / values.std()


@unit
def big_summary(values: np.ndarray) -> float:
    """A checksum of a large array."""
    return float(np.abs(values[::7, ::5]).sum())


@unit
def batch_of(number: int) -> list[int]:
    """A request for eight records."""
    return [number * 8 + k for k in range(8)]


@unit
def records(batch: list[int]) -> Iterator[np.ndarray]:
    """Fan-out: each record of the request, built with numpy."""
    for k in batch:
        yield np.random.default_rng(k).standard_normal(2048)


@unit(kind="filter")
def valid(record: np.ndarray) -> bool:
    """Keeps about half."""
    return bool(record[:64].sum() > 0)


@unit
def featurise(record: np.ndarray) -> float:
    """About 1 ms of numpy per kept record."""
    for _ in range(12):
        record = np.fft.irfft(np.fft.rfft(record) * 0.99, n=record.size)
    return float(record.std())


@unit
def parse_row(number: int) -> dict[str, Any]:
    """A row: its id and how costly it is to score (one in 16 costs 12 times the rest)."""
    _spin(0.0005)
    return {"id": number, "heavy": number % 16 == 0}


@unit
def score_row(row: dict[str, Any]) -> float:
    """1.5 ms of numpy scoring, 18 ms for a heavy row."""
    values = np.random.default_rng(row["id"]).standard_normal(4096)
    for _ in range(12 * 9 if row["heavy"] else 9):
        values = np.sort(values)[::-1] * 0.999
    return float(values[0])


try:  # a scikit-learn model, where scikit-learn is installed
    from sklearn.linear_model import LogisticRegression

    _MODEL: Any = LogisticRegression(max_iter=200).fit(
        np.random.default_rng(0).standard_normal((400, 64)),
        np.random.default_rng(1).integers(0, 2, 400))
except ImportError:
    _MODEL = None


@unit
def sk_features(number: int) -> np.ndarray:
    """64 features of a row."""
    return np.random.default_rng(number).standard_normal(64)


@unit
def sk_predict(features: np.ndarray) -> float:
    """The model's probability of class 1."""
    return float(_MODEL.predict_proba(features[None, :])[0, 1])


@unit
def sk_report(probability: float) -> float:
    """Rounded for a report."""
    return round(probability, 6)


@unit
def wait_fetch(number: int) -> bytes:
    """A storage read: 30 ms of waiting (sleep), then 16 KiB."""
    time.sleep(0.030)
    return np.random.default_rng(number).bytes(16 << 10)


@unit
def decode(body: bytes) -> float:
    """About 1 ms of CPU on what was read."""
    values = np.frombuffer(body, dtype=np.uint8).astype(np.float64)
    for _ in range(20):
        values = np.sqrt(values + 1.0)
    return float(values.sum())


@unit
def rows_in(number: int) -> np.ndarray:
    """A 128-float row."""
    return np.random.default_rng(number).standard_normal(128)


GROUPED = np.random.default_rng(5).standard_normal((128, 512)) / 12


@unit(batch_size=32)
def grouped(rows: list[np.ndarray]) -> list[float]:
    """Faster in batches: 0.6 ms of set-up per call (pure Python), then one matrix product."""
    _spin(0.0006)
    product = np.tanh(np.stack(rows) @ GROUPED)
    return [float(v) for v in product.mean(axis=1)]


@unit(io=8)
def lookup_row(number: int) -> dict[str, Any]:
    """A declared lookup: 20 ms of waiting (sleep), then a small record."""
    time.sleep(0.020)
    return {"id": number, "x": float(number % 97)}


class RowModel:
    """A model held in memory (3000 x 3000 float64, 69 MiB), light per row."""

    def __init__(self) -> None:
        self.weights = np.random.default_rng(3).standard_normal((3000, 3000))

    def __call__(self, record: dict[str, Any]) -> float:
        return float(self.weights[int(record["x"]) % 3000, :64].sum() * record["x"])


row_model = unit(name="row_model")(RowModel)


# ---------------------------------------------------------------------------------------
# The bench pipelines and how each is searched by hand.

@dataclass(frozen=True)
class Spec:
    """One bench pipeline: its shape, run size, monolith sweep and hand-layout grid.

    The grid is what a person tuning by hand would try: one to four replicas of the units
    that do the work, and one of those that do almost none (a second replica of a unit busy
    2% of the time cannot help).
    """

    pipeline: Pipeline
    shape: str
    items: int
    monolith: tuple[int, ...]
    grid: dict[str, tuple[int, ...]]
    held_out: bool = False  # one of bench/heldout/'s shapes (else a trained one)
    needs: str | None = None  # a module the shape needs; skipped, and said so, without it

    @property
    def name(self) -> str:
        """The pipeline's name."""
        return self.pipeline.name


SPECS = (
    Spec(Pipeline(fetch, parse, score, name="io_service"),
         "I/O-heavy: 20 ms loopback HTTP call (io=16), ~1 ms parse", 2400,
         (4, 8, 16, 32), {"fetch": (1, 2), "parse": (1, 2, 3), "score": (1,)}),
    Spec(Pipeline(make, transform, reduce_signal, name="cpu_numpy"),
         "CPU-heavy: numpy, ~5 ms in one stage", 1200,
         (1, 2, 3, 4), {"make": (1, 2), "transform": (1, 2, 3, 4), "reduce_signal": (1,)}),
    Spec(Pipeline(tokenize, embed, classify, name="batched_model"),
         "batched model unit: 4 dense 1024x1024 layers, batch_size=16", 6000,
         (1, 2, 3, 4), {"tokenize": (1, 2, 3), "embed": (1, 2), "classify": (1,)}),
    Spec(Pipeline(draw, keep, enrich, summarize, name="filter"),
         "filter keeps ~30%, ~4 ms stage after it", 3000,
         (1, 2, 3, 4), {"draw": (1, 2), "keep": (1, 2), "enrich": (1, 2, 3),
                        "summarize": (1,)}),
    Spec(Pipeline(load_doc, paragraphs, analyze, name="flat_map"),
         "flat-map: 8 paragraphs per document, ~0.5 ms each", 1500,
         (1, 2, 3, 4), {"load_doc": (1, 2), "paragraphs": (1,), "analyze": (1, 2, 3, 4)}),
    Spec(Pipeline(lookup, crunch, pack, name="undeclared"),
         "UNDECLARED units: 15 ms wait (sleep), ~3 ms numpy, pack", 2000,
         (4, 8, 16, 32), {"lookup": (4, 8, 12, 16), "crunch": (1, 2, 3), "pack": (1,)}),
    # Written for issue 22, after the model was settled (no re-tuning per shape).
    Spec(Pipeline(tile, project, tile_summary, name="blas_stages"),
         "numpy/BLAS: normalised 256x256 tile, 8 projections (matmul), summary", 1200,
         (1, 2, 3, 4), {"tile": (1, 2), "project": (1, 2, 3), "tile_summary": (1,)}),
    Spec(Pipeline(big_array, standardise, big_summary, name="large_arrays"),
         "large arrays between units: 1.2 MB float64 out of band, light work", 4000,
         (1, 2, 3, 4), {"big_array": (1, 2), "standardise": (1, 2), "big_summary": (1,)}),
    Spec(Pipeline(batch_of, records, valid, featurise, name="fanout_filter"),
         "fan-out x8 then a filter keeping ~half, ~1 ms numpy per kept record", 1600,
         (1, 2, 3, 4), {"batch_of": (1,), "records": (1, 2), "valid": (1,),
                        "featurise": (1, 2, 3)}),
    Spec(Pipeline(parse_row, score_row, name="heavy_tail"),
         "heavy-tailed: 0.5 ms parse, numpy scoring where 1 row in 16 costs 12x", 1600,
         (1, 2, 3, 4), {"parse_row": (1, 2), "score_row": (1, 2, 3)}),
    Spec(Pipeline(sk_features, sk_predict, sk_report, name="sklearn_model"),
         "scikit-learn: logistic regression predict_proba per row", 3000,
         (1, 2, 3, 4), {"sk_features": (1, 2), "sk_predict": (1, 2, 3), "sk_report": (1,)},
         needs="sklearn"),
    Spec(Pipeline(wait_fetch, decode, name="sleep_io"),
         "sleep-heavy I/O: 30 ms read (undeclared sleep), ~1 ms decode", 4000,
         (4, 8, 16, 32), {"wait_fetch": (4, 8, 16, 32), "decode": (1, 2)}),
    Spec(Pipeline(rows_in, grouped, name="batch_faster"),
         "faster in batches: 0.6 ms set-up per call, batch_size=32", 40000,
         (1, 2, 3, 4), {"rows_in": (1, 2), "grouped": (1, 2)}),
    # Written after stop 30, from a user's pipeline the plan read at 0.50x its prediction.
    Spec(Pipeline(lookup_row, row_model, name="lookup_model"),
         "declared lookup (io=8, 20 ms sleep), then a 69 MiB model, light per row",
         12000, (4, 8, 16, 32), {"lookup_row": (4, 8, 16, 24), "row_model": (1, 2)}),
    # Held out until stop 46, trained since: bench/seen/ (its README).
    *(Spec(h.pipeline, h.shape, h.items, h.monolith, h.grid) for h in seen.SHAPES),
    # Held out: bench/heldout/ (its README), reported in their own table.
    *(Spec(h.pipeline, h.shape, h.items, h.monolith, h.grid, held_out=True)
      for h in heldout.SHAPES),
)
GROUPS = {"trained": tuple(s.name for s in SPECS if not s.held_out),
          "heldout": tuple(s.name for s in SPECS if s.held_out)}
