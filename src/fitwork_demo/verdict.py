"""The demo's one verdict per comparison: median of N trials, their spread, and noise.

A layout's figure is the median of its trials' pages/s (startup left out, see ``sweep``)
and its spread the slowest and fastest trial.  A comparison is a win or a loss when each
side ran at least two trials and either the two spreads do not overlap (every trial of one
faster than every trial of the other) or, the layouts having run in alternating rounds, the
rounds' paired log ratios differ from 0 by a paired t-test (`PAIRED_P`, `MIN_ROUNDS`
rounds at least): a host whose load moves between rounds moves both layouts of a round
alike.  Otherwise it is "too noisy to call", whatever the ratio of the medians says.  The
console, ``summary.json`` and the HTML report all print `Verdict.text`, so they cannot
disagree.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scipy import stats

Outcome = Literal["win", "loss", "too noisy to call"]
NOISY: Outcome = "too noisy to call"
MIN_TRIALS = 2
"""Trials each side needs before a comparison can be more than "too noisy to call"."""
MIN_ROUNDS = 3
"""Alternating rounds the paired test needs (two leave one degree of freedom)."""
PAIRED_P = 0.05
"""The two-sided p-value under which the rounds' paired ratios call a difference."""


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (0.0 for none)."""
    return statistics.median(values) if values else 0.0


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(slowest, fastest) of ``values`` ((0, 0) for none)."""
    return (min(values), max(values)) if values else (0.0, 0.0)


@dataclass(frozen=True)
class Verdict:
    """One comparison: ``name``'s trials against ``base``'s, and the aim it was held to."""

    name: str
    base: str
    trials: tuple[float, ...]
    base_trials: tuple[float, ...]
    aim: float | None = None

    @property
    def value(self) -> float:
        """The median of the candidate's trials."""
        return median(self.trials)

    @property
    def base_value(self) -> float:
        """The median of the baseline's trials."""
        return median(self.base_trials)

    @property
    def ratio(self) -> float:
        """Median over median (0.0 when the baseline did nothing)."""
        return self.value / self.base_value if self.base_value > 0 else 0.0

    @property
    def overlap(self) -> bool:
        """Whether the two spreads overlap (some trial of each within the other's range)."""
        low, high = spread(self.trials)
        base_low, base_high = spread(self.base_trials)
        return low <= base_high and base_low <= high

    @property
    def enough(self) -> bool:
        """Whether both sides ran at least `MIN_TRIALS` trials."""
        return min(len(self.trials), len(self.base_trials)) >= MIN_TRIALS

    @property
    def paired_p(self) -> float | None:
        """The two-sided p-value of a paired t-test on the rounds' log ratios (trial i of
        each side ran in round i); None with unequal trials or under `MIN_ROUNDS`."""
        if len(self.trials) != len(self.base_trials) or len(self.trials) < MIN_ROUNDS:
            return None
        if min(*self.trials, *self.base_trials) <= 0:
            return None
        logs = [math.log(a / b) for a, b in zip(self.trials, self.base_trials, strict=True)]
        if max(logs) - min(logs) < 1e-12:  # no spread: the same ratio every round
            return 0.0 if abs(logs[0]) > 1e-12 else 1.0
        return float(stats.ttest_1samp(logs, 0.0).pvalue)

    @property
    def stable(self) -> bool:
        """Enough trials, and spreads apart or rounds that differ by the paired test."""
        if not self.enough:
            return False
        p = self.paired_p
        return not self.overlap or (p is not None and p < PAIRED_P)

    @property
    def outcome(self) -> Outcome:
        """``win`` or ``loss`` when `stable`; ``too noisy to call`` otherwise."""
        if not self.stable:
            return NOISY
        return "win" if self.value > self.base_value else "loss"

    @property
    def aim_met(self) -> bool | None:
        """A win by at least the aim (``None`` when there is no aim)."""
        if self.aim is None:
            return None
        return self.outcome == "win" and self.ratio >= self.aim

    @property
    def statistic(self) -> str:
        """What the figures are, in words."""
        counts = sorted({len(self.trials), len(self.base_trials)})
        n = " and ".join(str(c) for c in counts)
        return (f"median of {n} trial{'s' if counts[-1] != 1 else ''}, pages/s with the "
                "processes' startup left out; range: slowest to fastest trial")

    @property
    def why(self) -> str:
        """Why the outcome is what it is."""
        if not self.enough:
            return (f"fewer than {MIN_TRIALS} trials a side: no spread to tell a difference "
                    "from noise, not a stable verdict (run more --repeats)")
        p = self.paired_p
        if not self.overlap:
            return "every trial of one is faster than every trial of the other: stable"
        if p is not None and p < PAIRED_P:
            return (f"the trials overlap, but the {len(self.trials)} alternating rounds' "
                    f"ratios differ from 1 (paired t-test on their logs, p = {p:.3f}): "
                    "stable")
        paired = "" if p is None else f" and the rounds' ratios do not (paired p = {p:.2f})"
        return (f"the trials overlap{paired}: too noisy to tell this difference from the "
                "host's, not a stable verdict (run more --repeats, or on a quieter host)")

    @property
    def text(self) -> str:
        """The verdict as one line, the same in every output."""
        low, high = spread(self.trials)
        base_low, base_high = spread(self.base_trials)
        words = {"win": f"{self.name} WINS", "loss": f"{self.name} LOSES",
                 NOISY: "TOO NOISY TO CALL"}[self.outcome]
        aim = ""
        if self.aim is not None:
            aim = f"; aim >= {self.aim:g}x {'met' if self.aim_met else 'MISSED'}"
        return (f"{words}: {self.name} {self.value:.2f} items/s ({low:.2f}-{high:.2f}) vs "
                f"{self.base} {self.base_value:.2f} ({base_low:.2f}-{base_high:.2f}): "
                f"{self.ratio:.2f}x ({self.statistic}; {self.why}){aim}")

    def to_json(self) -> dict[str, Any]:
        """The verdict's figures and its line, for ``summary.json``."""
        return {"name": self.name, "base": self.base, "statistic": self.statistic,
                "value": self.value, "base_value": self.base_value, "ratio": self.ratio,
                "range": list(spread(self.trials)),
                "base_range": list(spread(self.base_trials)),
                "trials": list(self.trials), "base_trials": list(self.base_trials),
                "outcome": self.outcome, "stable": self.stable,
                "paired_p": self.paired_p,
                "aim": self.aim, "aim_met": self.aim_met, "text": self.text}
