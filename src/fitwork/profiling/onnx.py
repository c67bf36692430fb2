"""onnxruntime for the profiler: FLOPs, device bytes and device time of ONNX sessions.

Two tools, both used inside the profiler's child process only (onnxruntime is imported
lazily, never by ``import fitwork``):

- `OnnxRunTimer` times every ``run`` of a session placed on an accelerator (its first
  provider is not the CPU one).  onnxruntime synchronizes the provider's stream before
  ``run`` returns, so a run's duration is the time the session held the device, host-side
  copies and launches included.  Nothing is switched on in the sessions, so the timing
  carries no profiling overhead.
- `count_onnx` switches onnxruntime's own profiler on for the sessions created inside
  it (graph optimizations and weight prepacking off, so every node appears as shipped,
  weights included), and `OnnxCount.read` turns their JSON events into figures per run:

  =============  ==========================================================================
  FLOPs          Conv, ConvTranspose, MatMul, Gemm as `node_flops` counts them (two per
                 multiply-accumulate); elementwise ops, pooling, normalisation are left out
  device bytes   activation + parameter + output bytes of every node run on an
                 accelerator provider: an upper bound (fused kernels keep intermediates in
                 registers and caches)
  device time    the ``Kernel`` events of a GPU-profiling build of onnxruntime where there
                 are any (time on the device itself), else the ``model_run`` time of
                 sessions whose nodes ran on an accelerator provider
  =============  ==========================================================================

  A node's ``kernel_time`` on the CUDA provider is the time to launch it, not to run it,
  which is why device time comes from the kernel or run events instead.

Counted, for a node run with input shapes ``in`` and output shapes ``out``::

    Conv            2 x prod(out[0]) x prod(in[1][1:])        (C_in/groups x kH x kW each)
    ConvTranspose   2 x prod(in[0])  x prod(in[1][1:])        (C_out/groups x kH x kW each)
                    (without its weight shape: C_out from the output, one group, and a
                    kernel the size of the stride, output/input per spatial axis)
    MatMul          2 x prod(out[0]) x in[0][-1]
    Gemm            2 x prod(out[0]) x prod(in[0]) / out[0][0]
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COUNTED_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
CPU_PROVIDER = "CPUExecutionProvider"
RUN_METHODS = ("run", "run_with_iobinding", "run_with_ort_values")
"""The `Session` methods that run a model, each timed by `OnnxRunTimer`."""

Event = dict[str, Any]


# ---------------------------------------------------------------- profile events (pure)


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


def _is_node_run(event: Event) -> bool:
    return event.get("cat") == "Node" and str(event.get("name", "")).endswith("_kernel_time")


def _on_accelerator(event: Event) -> bool:
    provider = event.get("args", {}).get("provider")
    return bool(provider) and provider != CPU_PROVIDER


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def profile_flops(events: Iterable[Event]) -> float:
    """Total FLOPs of the node runs in an onnxruntime profile (its JSON events)."""
    total = 0.0
    for event in events:
        if not _is_node_run(event):
            continue
        args = event.get("args", {})
        total += node_flops(str(args.get("op_name", "")),
                            _shapes(args.get("input_type_shape", [])),
                            _shapes(args.get("output_type_shape", [])))
    return total


def profile_device_bytes(events: Iterable[Event]) -> float:
    """Bytes the node runs on an accelerator provider read and wrote (0 when none ran there).

    Per node run: its activation inputs, its parameters (weights) and its outputs, as the
    profiler sizes them.
    """
    total = 0.0
    for event in events:
        if _is_node_run(event) and _on_accelerator(event):
            args = event["args"]
            total += sum(_number(args.get(key))
                         for key in ("activation_size", "parameter_size", "output_size"))
    return total


def profile_device_seconds(events: Iterable[Event]) -> float | None:
    """Seconds on the device in an onnxruntime profile; ``None`` when nothing ran on one.

    The ``Kernel`` events of a GPU-profiling build where there are any; else, when some node
    ran on an accelerator provider, the ``model_run`` durations (the provider's stream is
    synchronized before a run ends).  Durations in the events are microseconds.
    """
    listed = list(events)
    kernels = [e for e in listed if e.get("cat") == "Kernel"]
    if kernels:
        return sum(_number(e.get("dur")) for e in kernels) / 1e6
    if not any(_is_node_run(e) and _on_accelerator(e) for e in listed):
        return None
    return sum(_number(e.get("dur")) for e in listed
               if e.get("cat") == "Session" and e.get("name") == "model_run") / 1e6


def runs_after(events: Iterable[Event], skip: int) -> list[Event]:
    """The events of every run but the first ``skip`` (the runs a constructor made, say).

    A run is its ``model_run`` event and the node and kernel events inside its time span.
    """
    listed = list(events)
    if skip <= 0:
        return listed
    runs = sorted((e for e in listed if e.get("cat") == "Session"
                   and e.get("name") == "model_run"), key=lambda e: _number(e.get("ts")))
    kept = runs[skip:]
    spans = [(_number(r.get("ts")), _number(r.get("ts")) + _number(r.get("dur"))) for r in kept]
    inside = [e for e in listed if e.get("cat") in ("Node", "Kernel")
              and any(start <= _number(e.get("ts")) <= end for start, end in spans)]
    return inside + kept


# ---------------------------------------------------------------- sessions (onnxruntime)


def profiling_options(prefix: Path | str, *, options: Any = None, threads: int | None = None
                      ) -> Any:
    """Session options that profile the graph as shipped: no optimizations, no prepacking.

    Without optimizations no node is fused away; without prepacking a node's weights stay
    among its inputs, so their shapes and bytes appear in the profile.  ``options`` is
    changed in place when given; ``threads`` pins intra- and inter-op threads.
    """
    import onnxruntime as ort

    options = options if options is not None else ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.enable_profiling = True
    options.profile_file_prefix = str(prefix)
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    return options


def session_events(session: Any) -> list[Event]:
    """End ``session``'s profiling and return its events (none when it was already ended).

    The session keeps working, unprofiled.
    """
    written = session.end_profiling()
    if not written:
        return []
    path = Path(written)
    try:
        events: list[Event] = json.loads(path.read_text())
    finally:
        path.unlink(missing_ok=True)
    return events


def _accelerated(session: Any) -> bool:
    """Whether the session's first provider is an accelerator's (CUDA, TensorRT, ROCm...)."""
    try:
        providers = session.get_providers()
    except Exception:
        return False
    return bool(providers) and providers[0] != CPU_PROVIDER


class OnnxRunTimer:
    """Seconds of runs of onnxruntime sessions on an accelerator, between `start` and `stop`.

    Wraps the run methods of onnxruntime's `Session` class until `close` (in the profiler's
    child process).  ``accelerated`` decides which sessions count: by default those whose
    first provider is not the CPU's.  Runs from several threads add up.
    """

    source = "onnxruntime"

    def __init__(self, accelerated: Callable[[Any], bool] = _accelerated) -> None:
        from onnxruntime.capi.onnxruntime_inference_collection import Session

        self._session_class = Session
        self._accelerated = accelerated
        self._lock = threading.Lock()
        self._seconds = 0.0
        self._runs = 0
        self._mark = (0.0, 0)
        self._originals: dict[str, Any] = {}
        for name in RUN_METHODS:
            original = getattr(Session, name, None)
            if original is not None:
                self._originals[name] = original
                setattr(Session, name, self._timed(original))

    def _timed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        timer = self

        def run(session: Any, *args: Any, **kwargs: Any) -> Any:
            if not timer._accelerated(session):
                return original(session, *args, **kwargs)
            began = time.perf_counter()
            try:
                return original(session, *args, **kwargs)
            finally:
                took = time.perf_counter() - began
                with timer._lock:
                    timer._seconds += took
                    timer._runs += 1

        return run

    def start(self) -> None:
        """Begin a window."""
        with self._lock:
            self._mark = (self._seconds, self._runs)

    def stop(self) -> float | None:
        """Accelerator seconds since `start`; ``None`` when no accelerated session ran."""
        with self._lock:
            seconds, runs = self._seconds - self._mark[0], self._runs - self._mark[1]
        return seconds if runs else None

    def peak_memory(self) -> int | None:
        """Unknown: onnxruntime does not report a session's device memory."""
        return None

    def close(self) -> None:
        """Put the original run methods back."""
        for name, original in self._originals.items():
            setattr(self._session_class, name, original)
        self._originals.clear()


@dataclass
class Runs:
    """How many onnxruntime session runs were made (any provider)."""

    count: int = 0


@contextlib.contextmanager
def watch_runs() -> Iterator[Runs]:
    """Count every session run made inside the block (nothing else is changed)."""
    from onnxruntime.capi.onnxruntime_inference_collection import Session

    runs = Runs()
    originals = {name: getattr(Session, name) for name in RUN_METHODS if hasattr(Session, name)}

    def counted(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(session: Any, *args: Any, **kwargs: Any) -> Any:
            runs.count += 1
            return original(session, *args, **kwargs)

        return run

    for name, original in originals.items():
        setattr(Session, name, counted(original))
    try:
        yield runs
    finally:
        for name, original in originals.items():
            setattr(Session, name, original)


@dataclass
class OnnxCount:
    """What onnxruntime's profiler saw of the runs made inside `count_onnx`."""

    sessions: list[Any] = field(default_factory=list)
    skip: dict[int, int] = field(default_factory=dict)
    runs: dict[int, int] = field(default_factory=dict)
    flops: float = 0.0
    device_bytes: float = 0.0
    device_s: float | None = None

    def mark(self) -> None:
        """From now on: runs made before this call are left out of the figures."""
        self.skip = dict(self.runs)

    def read(self) -> OnnxCount:
        """End profiling of every session and add up their events (after the mark)."""
        for session in self.sessions:
            try:
                events = session_events(session)
            except Exception:
                continue
            events = runs_after(events, self.skip.get(id(session), 0))
            self.flops += profile_flops(events)
            self.device_bytes += profile_device_bytes(events)
            seconds = profile_device_seconds(events)
            if seconds is not None:
                self.device_s = (self.device_s or 0.0) + seconds
        return self


@contextlib.contextmanager
def count_onnx(folder: Path | str | None = None) -> Iterator[OnnxCount]:
    """Profile every onnxruntime session created inside the block (see `profiling_options`).

    Session creation and runs are wrapped at the class, so sessions made by libraries that
    imported ``InferenceSession`` by name are caught too; sessions made before the block
    are not.  Call `OnnxCount.mark` before the runs to count and `OnnxCount.read` after.
    """
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession, Session

    count = OnnxCount()
    made = 0
    init, run = InferenceSession.__init__, Session.run

    with contextlib.ExitStack() as stack:
        where = Path(folder) if folder is not None else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="fitwork-onnx-")))

        def profiled_init(session: Any, path_or_bytes: Any, sess_options: Any = None,
                          *args: Any, **kwargs: Any) -> None:
            nonlocal made
            made += 1
            options = profiling_options(where / f"session{made}", options=sess_options)
            init(session, path_or_bytes, options, *args, **kwargs)
            count.sessions.append(session)

        def counted_run(session: Any, *args: Any, **kwargs: Any) -> Any:
            count.runs[id(session)] = count.runs.get(id(session), 0) + 1
            return run(session, *args, **kwargs)

        InferenceSession.__init__ = profiled_init  # type: ignore[method-assign]
        Session.run = counted_run  # type: ignore[method-assign]
        try:
            yield count
        finally:
            InferenceSession.__init__ = init  # type: ignore[method-assign]
            Session.run = run  # type: ignore[method-assign]
            for session in count.sessions:
                with contextlib.suppress(Exception):
                    session.end_profiling()
