"""Run records built directly, with chosen figures, for tests of what the report says."""

from __future__ import annotations

from typing import Any

from fitwork.telemetry.record import (
    CompletionSeries,
    DeviceSample,
    QueueSeries,
    ReplicaSeries,
    ResourceRecord,
    RunRecord,
    UnitRecord,
    WorkerRecord,
)

HOST: dict[str, Any] = {"name": "box-1", "cores": 8, "memory": 32 * 2**30,
                        "cpu_class": "cpu-x86", "cpu_model": "Test CPU 3000", "gpus": []}
GPU_HOST: dict[str, Any] = {**HOST, "gpus": [{"name": "NVIDIA H200", "memory": 141 * 2**30}]}


def record(run_id: str, *, throughput: float, items: int = 100, p50: float = 0.010,
           p95: float = 0.020, digest: str | None = "0123456789abcdef",
           cpu_s: float | None = None,
           units: dict[str, tuple[int, float]] | None = None,
           host: dict[str, Any] | None = HOST, status: str = "completed",
           failures: int = 0, completions: list[tuple[float, int]] | None = None,
           replicas: ReplicaSeries | None = None,
           device_samples: list[DeviceSample] | None = None) -> RunRecord:
    """A run of ``items`` source items at ``throughput`` items/s (so wall = items / rate).

    ``units`` maps each unit to (replicas, cores each); CPU seconds (by default 60% of the
    cores allocated, over the run) are split evenly among units and workers.  Completions
    default to one item settling at an even pace.
    """
    units = units or {"work": (2, 1.0)}
    wall = items / throughput
    allocated = sum(count * cores for count, cores in units.values())
    cpu_s = 0.6 * allocated * wall if cpu_s is None else cpu_s
    done = items - failures
    series = completions or [(wall * (i + 1) / done, i + 1) for i in range(done)]
    unit_records, workers = [], []
    worker_id = 0
    for name, (count, cores) in units.items():
        share = cpu_s / len(units)
        unit_records.append(UnitRecord(
            name=name, kind="map", replicas=count, resources={"cpu": cores},
            replica_s=count * wall, items_in=items, items_out=done, busy_s=0.8 * wall * count,
            busy_fraction=0.8, cpu_s=share, failures=failures))
        for _ in range(count):
            workers.append(WorkerRecord(
                worker_id=worker_id, unit=name, pid=1000 + worker_id, started_s=0.0,
                ended_s=wall, items_in=items // count, items_out=done // count,
                busy_s=0.8 * wall, cpu_s=share / count,
                busy_intervals=[(0.1 * wall, 0.9 * wall)]))
            worker_id += 1
    return RunRecord(
        fitwork_version="test", run_id=run_id, pipeline="demo", engine="local",
        started_at=1_700_000_000.0, wall_s=wall, items_in=items, items_completed=done,
        outputs=done, failures=failures, poisoned=0, retries=0, worker_restarts=0,
        throughput=throughput, latency_p50_s=p50, latency_p95_s=p95, units=unit_records,
        resources=[ResourceRecord(resource="cpu", allocated=allocated,
                                  allocated_s=allocated * wall, used_s=cpu_s,
                                  utilization=cpu_s / (allocated * wall), basis="test")],
        workers=workers,
        queue=QueueSeries(times_s=[0.0, wall], depths={n: [0, 0] for n in units}),
        status=status, error="stopped by a test" if status != "completed" else None,
        completions=CompletionSeries(times_s=[t for t, _ in series],
                                     completed=[c for _, c in series]),
        replicas=replicas or ReplicaSeries(times_s=[0.0], counts={
            n: [count] for n, (count, _) in units.items()}),
        placement={"source": "declared", "groups": []},
        device_samples=device_samples or [], host=host, output_digest=digest)


def gpu_samples(wall: float, devices: int = 2, count: int = 11) -> list[DeviceSample]:
    """Readings of ``devices`` H200s every ``wall / (count - 1)`` seconds."""
    return [DeviceSample(t_s=wall * i / (count - 1), device=d, name="NVIDIA H200",
                         utilization=min(1.0, 0.1 * i + 0.05 * d),
                         memory_used=(10 + i + 5 * d) * 2**30, memory_total=141 * 2**30,
                         power_w=200.0 + 10 * i)
            for i in range(count) for d in range(devices)]
