"""The demo's verdict: median of N trials, their range, and "too noisy to call" where neither
their spreads nor their paired rounds tell them apart."""

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


def test_overlapping_trials_whose_rounds_disagree_are_too_noisy_to_call() -> None:
    # the busy host moved one layout's trials 3.6x (10.05 vs 2.75); round by round the
    # fitted one is ahead, behind, ahead: nothing to call
    noisy = Verdict("fitted", "best monolith", (10.05, 2.75, 12.37), (13.94, 9.0, 11.0),
                    aim=1.25)
    assert noisy.overlap and noisy.outcome == "too noisy to call" and not noisy.stable
    assert noisy.aim_met is False and noisy.paired_p is not None and noisy.paired_p > 0.05
    assert noisy.text.startswith("TOO NOISY TO CALL: ") and "not a stable verdict" in noisy.text
    big = Verdict("fitted", "m", (1.0, 30.0), (2.0, 3.0))
    assert big.ratio > 5 and big.outcome == "too noisy to call"


def test_a_loss_every_round_is_called_though_the_host_moved_both_sides() -> None:
    # issue 37: 0.52x the best monolith, but the host's load moved both layouts' trials so
    # their ranges overlapped; each round (run alternately) has the fitted one at ~half
    fitted = (6.1, 3.2, 4.9, 2.6)
    monolith = (11.5, 6.4, 9.8, 5.1)
    loss = Verdict("fitted", "best monolith", fitted, monolith, aim=0.95)
    assert loss.overlap and loss.paired_p is not None and loss.paired_p < 0.05
    assert loss.outcome == "loss" and loss.stable and loss.aim_met is False
    assert loss.text.startswith("fitted LOSES: ") and "paired t-test" in loss.text
    assert loss.to_json()["stable"] is True and loss.to_json()["paired_p"] < 0.05
    # the same figures in another order pair up no longer: unequal rounds are not paired
    assert Verdict("fitted", "m", fitted[:3], monolith).paired_p is None


def test_one_trial_a_side_is_not_a_verdict() -> None:
    one = Verdict("fitted", "m", (20.0,), (10.0,), aim=1.25)
    assert not one.enough and one.outcome == "too noisy to call" and not one.aim_met
    assert "fewer than 2 trials a side" in one.text
    assert one.to_json()["stable"] is False and one.to_json()["text"] == one.text
