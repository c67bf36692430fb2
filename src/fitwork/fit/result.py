"""What the solver returns: replicas per (unit, device class, node type) and the plan's figures."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fitwork.fit.spec import is_cpu_class

Objective = Literal["max_throughput", "min_cost"]
Status = Literal["optimal", "feasible", "time_limit", "repaired"]
Method = Literal["milp", "lp_round"]


class Placement(BaseModel):
    """Replicas of one unit on one device class of one node type, and the load they carry.

    Per replica: ``rate`` items/s when busy, at ``batch_size``; ``cores`` the cores it is
    planned to use (its reservation when ``reserved``, else its share of the load's
    core-seconds per second, e.g. 0.3); ``memory`` bytes held; ``device_share`` its slot on
    a device of ``device_class`` and ``device_time`` the device-seconds per second its load
    uses.  ``nodes`` is the node index (within the node type) of each replica, as packed.
    ``option`` is which of the unit's demands on the class they run (0: the one in
    ``classes``, k: ``alternatives[k - 1]``; for the fused baseline, 1 is the threaded
    monolith).  ``threads`` is the calls one replica runs at once where that is more than
    one (a unit's ``io``, or the threads the fit chose for a fused replica).
    """

    model_config = ConfigDict(frozen=True)

    unit: str
    device_class: str
    node_type: str
    replicas: int
    items_per_s: float
    batch_size: int | None = None
    rate: float = 0.0
    cores: float = 0.0
    reserved: bool = False
    memory: float = 0.0
    device_share: float = 0.0
    device_time: float = 0.0
    nodes: list[int] = Field(default_factory=list)
    option: int = 0
    threads: int | None = None


class ClassUtilization(BaseModel):
    """Fleet utilization of one device class: busy device-seconds over allocated ones.

    For a ``cpu-`` class the devices are cores. ``allocated`` counts the devices (or cores)
    of the nodes the plan uses; ``busy`` is device-seconds per second the plan keeps busy.
    """

    model_config = ConfigDict(frozen=True)

    device_class: str
    busy: float
    allocated: float
    utilization: float


class NodeUsage(BaseModel):
    """One node type: what the plan holds against what all ``count`` nodes offer.

    ``cores_used`` is ``cores_reserved`` (held whole) plus ``cores_fluid`` (core-seconds per
    second the planned load consumes); the fluid part stays within ``core_ceiling`` of the
    cores left after reservations.  ``devices_used`` counts device slots held,
    ``devices_time`` device-seconds per second consumed.  ``nodes_used`` is how many nodes
    the packing put replicas on.
    """

    model_config = ConfigDict(frozen=True)

    node_type: str
    count: int
    nodes_used: int
    cores_used: float
    cores_capacity: float
    memory_used: float
    memory_capacity: float
    devices_used: dict[str, float]
    cores_reserved: float = 0.0
    cores_fluid: float = 0.0
    core_ceiling: float = 1.0
    devices_time: dict[str, float] = Field(default_factory=dict)
    devices_capacity: dict[str, float]
    network_out: float
    network_in: float
    network_capacity: float | None


class FitResult(BaseModel):
    """A fitted plan and its figures.

    ``objective_value`` is T (items/s at the source) for ``max_throughput`` and the price per
    hour of the nodes used for ``min_cost``; ``bound`` is the best proven bound on it (upper
    for throughput, lower for cost: the tighter of the LP relaxation, ``lp_bound``, and the
    MILP's dual bound) and ``gap`` is ``|bound - value| / max(bound, value)``, i.e.
    ``(bound - T) / bound`` or ``(cost - bound) / cost``.
    ``status`` is ``optimal`` only when the plan is proved at a gap of zero, ``feasible``
    when it states a ``gap`` above zero without a repair (within the requested gap or not),
    ``repaired`` when packing it needed a repair that left it outside the requested gap,
    ``time_limit`` when HiGHS stopped on the time limit with this plan as its best; `label`
    says it with the gap. ``method`` says where the
    plan came from: ``milp`` (HiGHS branch-and-bound) or ``lp_round`` (the LP relaxation rounded
    down and filled greedily, kept when it is already within the gap or beats the MILP).
    ``solve_seconds`` is wall seconds in HiGHS in all, ``lp_seconds`` the relaxation's part.
    ``nodes_used`` per type is the fewest nodes whose capacity covers the plan's usage.
    """

    model_config = ConfigDict(frozen=True)

    objective: Objective
    status: Status
    method: Method
    throughput: float
    target: float | None
    objective_value: float
    bound: float
    lp_bound: float
    gap: float
    solve_seconds: float
    lp_seconds: float
    replicas: list[Placement]
    utilization: list[ClassUtilization]
    nodes: list[NodeUsage]
    bottleneck: str | None
    bottleneck_reason: str
    cost_per_hour: float
    cost_per_million: float | None

    @property
    def label(self) -> str:
        """The solver's word on this plan: ``optimal`` (a proven gap of zero), else its
        status with the gap it states, e.g. ``feasible (gap 0.4%)``."""
        if self.status == "optimal":
            return "optimal"
        gap = f"{self.gap:.1%}" if self.gap >= 1e-3 else f"{self.gap * 100:.2g}%"
        return f"{self.status.replace('_', ' ')} (gap {gap})"

    def utilization_of(self, device_class: str) -> float:
        """Predicted utilization of ``device_class`` (0.0 when the plan allocates none)."""
        for entry in self.utilization:
            if entry.device_class == device_class:
                return entry.utilization
        return 0.0

    def accelerator_utilization(self) -> float:
        """Busy over allocated device-seconds, summed over every non-CPU device class."""
        rows = [u for u in self.utilization if not is_cpu_class(u.device_class)]
        allocated = sum(u.allocated for u in rows)
        return sum(u.busy for u in rows) / allocated if allocated else 0.0
