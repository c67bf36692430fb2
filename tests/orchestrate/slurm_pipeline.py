"""The pipeline the real-Slurm test runs: the Ray engine tests' CPU, GPU-class, CPU units."""

from __future__ import annotations

from fitwork import Pipeline
from tests.engine.placed_units import finish, model, prepare

pipeline = Pipeline(prepare, model, finish, name="placed")
