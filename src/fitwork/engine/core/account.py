"""The run record, assembled from the core's books: pure, from values the core holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fitwork.engine.core.machine import RunCore
from fitwork.telemetry.record import (
    CompletionSeries,
    CoreLog,
    DeviceSample,
    ProcessSample,
    QueueSeries,
    Refit,
    ReplicaSeries,
    RunRecord,
    RunStatus,
    UnitRecord,
    WorkerRecord,
    latency_figures,
    resource_utilization,
    summarize_units,
)
from fitwork.version import __version__


def replica_seconds(core: RunCore, wall: float) -> list[float]:
    """Per stage, live replicas integrated over the run (resizes and deaths included)."""
    totals = [0.0] * len(core.stages)
    series = core.replica_series
    for index, (start, counts) in enumerate(series):
        end = series[index + 1][0] if index + 1 < len(series) else wall
        for stage, count in enumerate(counts):
            totals[stage] += count * max(0.0, min(end, wall) - start)
    return totals


def assemble(core: RunCore, *, pipeline: str, engine: str, now: float, started_at: float,
             status: RunStatus = "completed", error: str | None = None,
             dead_letter: str | None = None,
             device_samples: Sequence[DeviceSample] = (),
             process_samples: Sequence[ProcessSample] = (),
             host: dict[str, Any] | None = None, refits: Sequence[Refit] = ()) -> RunRecord:
    """The record of a run whose books ``core`` kept, ended (or interrupted) at ``now``;
    unless it completed, with the core's log (`fitwork.engine.core.log`) to replay it."""
    wall = max(now - core.t0, 1e-9)
    workers = [
        WorkerRecord(
            worker_id=w.id, unit=core.names[w.stage], pid=w.pid, node=w.node,
            started_s=w.started - core.t0,
            ended_s=(w.ended - core.t0) if w.ended is not None else None,
            exit_code=w.code, exit_cause=w.cause or None,
            items_in=w.counters.items_in, items_out=w.counters.items_out,
            bytes_in=w.counters.bytes_in, bytes_out=w.counters.bytes_out,
            busy_s=w.counters.busy_s, blocked_s=w.counters.blocked_s, cpu_s=w.counters.cpu_s,
            build_cpu_s=w.build_cpu_s, busy_intervals=w.intervals)
        for w in core.workers.values()
    ]
    held = replica_seconds(core, wall)
    bases = [UnitRecord(name=stage.name, kind=stage.kind, replicas=core.targets[index],
                        resources=dict(stage.demand), batch_size=stage.batch_size,
                        replica_s=held[index],
                        failures=core.failures_by_unit.get(stage.name, 0))
             for index, stage in enumerate(core.stages)]
    units = summarize_units(bases, workers, wall)
    p50, p95 = latency_figures(core.latencies)
    names = core.names
    queue = QueueSeries(times_s=[t for t, _ in core.samples],
                        depths={n: [d[i] for _, d in core.samples] for i, n in enumerate(names)})
    replicas = ReplicaSeries(
        times_s=[t for t, _ in core.replica_series],
        counts={n: [c[i] for _, c in core.replica_series] for i, n in enumerate(names)})
    completions = CompletionSeries(times_s=[t for t, _ in core.completions],
                                   completed=[c for _, c in core.completions])
    return RunRecord(
        fitwork_version=__version__, run_id=core.run_id, pipeline=pipeline, engine=engine,
        started_at=started_at, wall_s=wall, items_in=core.fed, items_completed=core.completed,
        outputs=core.outputs, failures=core.failures, poisoned=core.poisoned,
        retries=core.retries, worker_restarts=core.restarts,
        throughput=core.completed / wall, latency_p50_s=p50, latency_p95_s=p95,
        units=units, resources=resource_utilization(units, wall), workers=workers,
        queue=queue, failed_items=list(core.failed_items), dead_letter=dead_letter,
        status=status, error=error, completions=completions, replicas=replicas,
        placement=core.placement.to_json(), device_samples=list(device_samples),
        process_samples=list(process_samples), host=host,
        refits=list(refits),
        core_log=CoreLog.model_validate(core.log.to_json()) if status != "completed" else None)


def counted_items(record: RunRecord, items_in: dict[int, int],
                  items_out: dict[int, int]) -> RunRecord:
    """``record`` with each worker's items in and out as its driver counted them (items,
    not deliveries; a worker it did not count keeps its own), and so each unit's."""
    workers = [w.model_copy(update={
        "items_in": items_in.get(w.worker_id, w.items_in),
        "items_out": items_out.get(w.worker_id, w.items_out)})
        for w in record.workers]
    units = [u.model_copy(update={
        "items_in": sum(w.items_in for w in workers if w.unit == u.name),
        "items_out": sum(w.items_out for w in workers if w.unit == u.name)})
        for u in record.units]
    return record.model_copy(update={"workers": workers, "units": units})
