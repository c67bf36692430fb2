"""LLM serving as units: prefill and decode fitted to GPU types under SLOs, replayed on traces."""

from fitwork.llm.options import SLO
from fitwork.llm.phases import (
    LLMInputError,
    PhaseBook,
    PhaseModel,
    PhaseRow,
    default_book,
    leave_class_out,
    load_phase_csv,
    load_splitwise,
    write_phase_csv,
)
from fitwork.llm.plan import (
    CannotServe,
    LLMPlan,
    PlanSet,
    load_fleet,
    plan_colocated,
    plan_llm,
    plan_split,
)
from fitwork.llm.result import ReplayCheck
from fitwork.llm.sim import SimResult, compare, replay, simulate_llm
from fitwork.llm.trace import Trace, load_azure, load_trace, shipped_trace
from fitwork.llm.verify import plan_held

__all__ = [
    "SLO",
    "CannotServe",
    "LLMInputError",
    "LLMPlan",
    "PhaseBook",
    "PhaseModel",
    "PhaseRow",
    "PlanSet",
    "ReplayCheck",
    "SimResult",
    "Trace",
    "compare",
    "default_book",
    "leave_class_out",
    "load_azure",
    "load_fleet",
    "load_phase_csv",
    "load_splitwise",
    "load_trace",
    "plan_colocated",
    "plan_held",
    "plan_llm",
    "plan_split",
    "replay",
    "shipped_trace",
    "simulate_llm",
    "write_phase_csv",
]
