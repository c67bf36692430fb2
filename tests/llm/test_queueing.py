"""The queueing approximations against exact M/M/1 and M/M/c figures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fitwork.llm.queueing import (
    erlang_c,
    max_utilization,
    mg1_mean_wait,
    mg1_wait_quantile,
    mgc_wait_quantile,
)


def test_mm1_wait_quantile_is_exact() -> None:
    # M/M/1, mu = 10/s, rho = 0.8: P(W > w) = rho exp(-mu (1 - rho) w).
    mean_s, rho = 0.1, 0.8
    w = mg1_wait_quantile(rho, mean_s, 2 * mean_s ** 2, q=0.9)
    assert rho * math.exp(-10 * 0.2 * w) == pytest.approx(0.1)
    assert mg1_mean_wait(rho, mean_s, 2 * mean_s ** 2) == pytest.approx(0.4)
    assert mg1_wait_quantile(0.05, mean_s, 2 * mean_s ** 2) == 0.0


def test_erlang_c_and_mgc() -> None:
    assert erlang_c(2, 0.5) == pytest.approx(1 / 3)  # a = 1 Erlang on 2 servers
    assert erlang_c(1, 0.7) == pytest.approx(0.7)
    one = mgc_wait_quantile(0.9, 0.1, 0.02, servers=1)
    assert one == pytest.approx(mg1_wait_quantile(0.9, 0.1, 0.02))
    assert mgc_wait_quantile(0.9, 0.1, 0.02, servers=8) < one


def test_max_utilization_meets_the_slo_and_no_more() -> None:
    service = np.full(100, 0.2)
    rho = max_utilization(service, 1.0)
    assert 0 < rho < 1
    assert 0.2 + mg1_wait_quantile(rho, 0.2, 0.04) == pytest.approx(1.0, abs=1e-6)
    assert max_utilization(service, 0.1) == 0.0  # the service alone misses it
    assert max_utilization(service, 1.0, servers=16) > rho
