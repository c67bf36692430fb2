"""The demo's verdict: median of N trials, their range, and "within noise" where they overlap."""

from __future__ import annotations

import pytest

from fitwork_demo.verdict import Verdict


def test_a_win_needs_every_trial_ahead() -> None:
    win = Verdict("fitted", "best monolith", (14.7, 12.9, 13.4), (8.5, 9.1, 8.8), aim=1.25)
    assert win.value == 13.4 and win.base_value == 8.8
    assert win.ratio == pytest.approx(13.4 / 8.8)
    assert win.outcome == "win" and win.aim_met
    assert win.text.startswith("fitted WINS: fitted 13.40 items/s (12.90-14.70) vs best "
                               "monolith 8.80 (8.50-9.10): 1.52x (median of 3 trials")
    assert win.text.endswith("aim >= 1.25x met")
    loss = Verdict("fitted", "best monolith", (5.0, 6.0), (8.0, 9.0))
    assert loss.outcome == "loss" and "fitted LOSES" in loss.text and loss.aim_met is None


def test_overlapping_trials_are_within_noise_whatever_the_ratio() -> None:
    # the case: the busy host moved one layout's trials 3.6x (10.05 vs 2.75)
    noisy = Verdict("fitted", "best monolith", (10.05, 2.75, 12.37), (13.94, 9.0, 11.0),
                    aim=1.25)
    assert noisy.overlap and noisy.outcome == "within noise"
    assert noisy.aim_met is False
    assert noisy.text.startswith("WITHIN NOISE: ") and "not a stable verdict" in noisy.text
    big = Verdict("fitted", "m", (1.0, 30.0), (2.0, 3.0))
    assert big.ratio > 5 and big.outcome == "within noise"


def test_one_trial_a_side_is_not_a_verdict() -> None:
    one = Verdict("fitted", "m", (20.0,), (10.0,), aim=1.25)
    assert not one.enough and one.outcome == "within noise" and not one.aim_met
    assert "fewer than 2 trials a side" in one.text
    assert one.to_json()["stable"] is False and one.to_json()["text"] == one.text
