"""The pipelines the real-Slurm tests run: the Ray engine tests' CPU, GPU-class, CPU units,
and the same with a last unit that holds every item until a gate file exists (named by
FITWORK_TEST_GATE), so a test can look at a job's Ray while the run is under way."""

from __future__ import annotations

import os
import time

from fitwork import Pipeline, unit
from tests.engine.placed_units import finish, model, prepare

pipeline = Pipeline(prepare, model, finish, name="placed")


@unit(cpu=1, name="finish")
def gated_finish(x: int) -> int:
    gate = os.environ.get("FITWORK_TEST_GATE")
    while gate and not os.path.exists(gate):
        time.sleep(0.05)
    return x


gated = Pipeline(prepare, model, gated_finish, name="placed")
