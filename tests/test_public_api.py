"""The public API: every exported name resolves, lazily, to what it says, whatever is loaded."""

from __future__ import annotations

import subprocess
import sys

import fitwork


def test_every_exported_name_resolves() -> None:
    for name in fitwork.__all__:
        assert getattr(fitwork, name) is not None, name


def test_exported_functions_stay_functions_after_their_packages_load() -> None:
    code = ("import fitwork, fitwork.fit.solver, fitwork.decomposition\n"
            "assert callable(fitwork.plan_for) and callable(fitwork.decompose)\n"
            "assert callable(fitwork.run) and callable(fitwork.profile_pipeline)\n"
            "from fitwork import plan_for, decompose\n"
            "assert plan_for.__name__ == 'plan_for' and decompose.__name__ == 'decompose'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_llm_planning_is_public_and_loads_only_when_used() -> None:
    code = ("import sys, fitwork\n"
            "assert 'fitwork.llm' not in sys.modules\n"
            "assert fitwork.simulate_llm.__name__ == 'simulate_llm'\n"
            "assert callable(fitwork.plan_llm) and fitwork.SLO and fitwork.LLMPlan\n"
            "assert 'fitwork.llm' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
