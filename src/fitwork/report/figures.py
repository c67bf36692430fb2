"""The report's own arithmetic over run records: ratios, host use, measured rates, re-fits."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fitwork.telemetry.record import DeviceSample, RunRecord

OutputCheck = Literal["same", "different", "not checked"]
HostCheck = Literal["same host", "different hosts", "host not recorded"]
HOST_IDENTITY = ("name", "cores", "memory", "cpu_model", "cpu_class", "gpus")


def speedup(candidate: float | None, baseline: float | None) -> float | None:
    """``candidate / baseline`` (how many times the baseline); ``None`` without a baseline."""
    if candidate is None or baseline is None or baseline <= 0 or not math.isfinite(baseline):
        return None
    return candidate / baseline


def baseline_index(labels: Sequence[str]) -> int:
    """The run the others are compared with: the one labelled monolithic, else the first."""
    for index, label in enumerate(labels):
        if "monolith" in label.lower():
            return index
    return 0


def compared(labels: Sequence[str]) -> list[int]:
    """The runs compared with the baseline: labelled fitted first, then in order."""
    base = baseline_index(labels)
    others = [i for i in range(len(labels)) if i != base]
    return sorted(others, key=lambda i: "fit" not in labels[i].lower())


def cpu_seconds(record: RunRecord) -> float:
    """Process CPU seconds (user + system) every worker of the run used, building its unit
    included."""
    by_units = sum(u.used_cpu_s for u in record.units)
    return by_units or sum(w.used_cpu_s for w in record.workers)


def host_cores(host: Mapping[str, Any] | None) -> float | None:
    """The host's cores as the record describes it; ``None`` when not recorded."""
    cores = (host or {}).get("cores")
    if isinstance(cores, bool) or not isinstance(cores, int | float) or cores <= 0:
        return None
    return float(cores)


def cores_busy_of_host(cpu_s: float, cores: float | None, wall_s: float) -> float | None:
    """CPU seconds used / (host cores x wall seconds): the host's share the run kept busy.

    Unlike fleet utilization (over the cores the run *allocated*) its denominator is the
    same for every run on one host, so it compares runs that allocate different cores.
    """
    if cores is None or cores <= 0 or wall_s <= 0:
        return None
    return cpu_s / (cores * wall_s)


def machines(host: Mapping[str, Any]) -> frozenset[str] | None:
    """The machines a host description names: a cluster's ``hostnames`` (Ray's nodes), else
    a single host's ``name``; ``None`` when it names none."""
    names = host.get("hostnames")
    if isinstance(names, list | tuple) and names:
        return frozenset(str(n) for n in names)
    name = host.get("name")
    return frozenset([str(name)]) if name and "hostnames" not in host else None


def compare_hosts(hosts: Sequence[Mapping[str, Any] | None]) -> HostCheck:
    """Whether the runs were on one host, as far as their host descriptions tell.

    Where a run went through a cluster (its description lists ``hostnames``), the runs are
    on the same host when they name the same machines: a one-node Ray cluster on this host
    is the same host as a local run on it, whatever each engine counts as its cores.
    Otherwise the descriptions must agree on name, cores, memory, CPU and GPUs.
    """
    if any(not h for h in hosts):
        return "host not recorded"
    present = [h for h in hosts if h]
    if any("hostnames" in h for h in present):
        named = [machines(h) for h in present]
        if all(n is not None for n in named):
            return "same host" if len(set(named)) == 1 else "different hosts"
    keys = {tuple(str(h.get(k)) for k in HOST_IDENTITY) for h in present}
    return "same host" if len(keys) == 1 else "different hosts"


def outputs_match(digests: Sequence[str | None]) -> OutputCheck:
    """``same`` when every run's output digest is equal, ``different`` when two recorded
    ones differ, ``not checked`` when a run has none (or there is one run)."""
    known = {d for d in digests if d}
    if len(known) > 1:
        return "different"
    if len(digests) < 2 or len(known) == 0 or any(not d for d in digests):
        return "not checked"
    return "same"


def comparison_basis(baseline: RunRecord, candidate: RunRecord) -> list[str]:
    """What a comparison of two runs rests on: measured, the host, the input."""
    terms = ["measured"]
    terms.append(compare_hosts([baseline.host, candidate.host]))
    outputs = outputs_match([baseline.output_digest, candidate.output_digest])
    if baseline.items_in != candidate.items_in:
        terms.append(f"different inputs: {candidate.items_in:,} vs {baseline.items_in:,} items")
    elif outputs == "same":
        terms.append("same input")
    elif outputs == "different":
        terms.append(f"same item count ({baseline.items_in:,}) but DIFFERENT outputs")
    else:
        terms.append(f"same item count ({baseline.items_in:,}), outputs not checked")
    unfinished = [f"{name} run {r.status}" for name, r in (("baseline", baseline),
                                                           ("compared", candidate))
                  if r.status != "completed"]
    return terms + unfinished


def comparable(baseline: RunRecord, candidate: RunRecord) -> bool:
    """Whether two runs can be compared at face value: both completed, the same number of
    items in, and outputs not known to differ."""
    return (baseline.status == candidate.status == "completed"
            and baseline.items_in == candidate.items_in
            and outputs_match([baseline.output_digest, candidate.output_digest]) != "different")


def completion_rates(times_s: Sequence[float], completed: Sequence[int], width: float,
                     wall_s: float) -> list[tuple[float, float, float]]:
    """Measured source items/s per ``width``-second bucket from 0 to ``wall_s``.

    ``completed`` is cumulative (items settled by each moment in ``times_s``); a bucket's
    rate is the items settled within it over its length (the last one may be shorter, and
    takes whatever settled after it began).  Returns ``(start, end, items/s)`` per bucket.
    """
    if width <= 0:
        raise ValueError(f"bucket width {width} must be > 0")
    pairs = sorted(zip(times_s, completed, strict=True))
    times = [t for t, _ in pairs]
    totals = [c for _, c in pairs]

    def settled_by(t: float) -> int:
        index = bisect.bisect_right(times, t)
        return totals[index - 1] if index else 0

    count = max(1, math.ceil(wall_s / width - 1e-9))
    rates = []
    for i in range(count):
        start, end = i * width, min((i + 1) * width, wall_s)
        if end <= start:
            continue
        upto = totals[-1] if i == count - 1 and totals else settled_by(end)
        rates.append((start, end, (upto - settled_by(start)) / (end - start)))
    return rates


@dataclass(frozen=True)
class DeviceFigures:
    """One accelerator over a run: how busy it was and how much memory it held."""

    node: str | None
    device: int
    name: str
    samples: int
    mean_utilization: float
    peak_memory: int
    memory_total: int
    mean_power_w: float | None


def device_key(sample: DeviceSample) -> tuple[str, int]:
    """The (node, NVML index) a sample was read from, for sorting and grouping."""
    return (sample.node or "", sample.device)


def device_figures(samples: Sequence[DeviceSample]) -> list[DeviceFigures]:
    """Per device sampled, in (node, index) order: mean utilization, peak memory, power."""
    groups: dict[tuple[str, int], list[DeviceSample]] = {}
    for sample in samples:
        groups.setdefault(device_key(sample), []).append(sample)
    rows = []
    for key in sorted(groups):
        mine = groups[key]
        powers = [s.power_w for s in mine if s.power_w is not None]
        rows.append(DeviceFigures(
            node=mine[0].node, device=mine[0].device, name=mine[0].name, samples=len(mine),
            mean_utilization=sum(min(max(s.utilization, 0.0), 1.0) for s in mine) / len(mine),
            peak_memory=max(s.memory_used for s in mine),
            memory_total=max(s.memory_total for s in mine),
            mean_power_w=sum(powers) / len(powers) if powers else None))
    return rows


@dataclass(frozen=True)
class Refit:
    """One re-fit during a run: when, why, replicas before and after, predicted items/s."""

    t_s: float
    reason: str
    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    predicted_before: float | None = None
    predicted_after: float | None = None

    def changes(self) -> dict[str, tuple[int, int]]:
        """Units whose replicas changed: ``{unit: (before, after)}``."""
        names = list(dict.fromkeys([*self.before, *self.after]))
        return {n: (self.before.get(n, 0), self.after.get(n, 0)) for n in names
                if self.before.get(n, 0) != self.after.get(n, 0)}


def _get(entry: Any, name: str) -> Any:
    return entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name, None)


def _counts(value: Any) -> dict[str, int]:
    return {str(k): int(v) for k, v in (value or {}).items()}


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def refits(record: RunRecord) -> list[Refit]:
    """The record's re-fits in time order (records written before re-fits were kept: none).

    Entries may be models or plain dicts with ``t_s``, ``reason``, ``before``, ``after``,
    ``predicted_before`` and ``predicted_after``.
    """
    entries = getattr(record, "refits", None) or []
    found = [Refit(t_s=float(_get(e, "t_s") or 0.0), reason=str(_get(e, "reason") or ""),
                   before=_counts(_get(e, "before")), after=_counts(_get(e, "after")),
                   predicted_before=_number(_get(e, "predicted_before")),
                   predicted_after=_number(_get(e, "predicted_after")))
             for e in entries]
    return sorted(found, key=lambda r: r.t_s)


def replica_steps(times_s: Sequence[float], counts: Sequence[int],
                  wall_s: float) -> list[tuple[float, float]]:
    """A unit's live replicas as step-line points from its first count to ``wall_s``."""
    points = [(t, float(c)) for t, c in zip(times_s, counts, strict=False)]
    if points and points[-1][0] < wall_s:
        points.append((wall_s, points[-1][1]))
    return points
