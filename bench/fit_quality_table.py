"""fit_quality's summary: the table of figures per pipeline, the aims, the configurations."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace

from fit_quality_measure import BASELINE_KINDS, QUIET_CORES, SKIPPED, Contender, Outcome

from fitwork.fit.plan import Plan

REALIZED_AIM = 0.15  # the plan's realized throughput within this share of its prediction
HAND_AIM = 0.95  # the plan against the best baseline (monolith sweeps, threaded, hand grid)


def _predicted(contender: Contender) -> float:
    """A plan contender's predicted items/s."""
    assert isinstance(contender.placement, Plan)
    return contender.placement.fitted.throughput


def verdict(value: float, aim: float) -> str:
    """``met`` or ``MISSED`` against an aim."""
    return "met" if value >= aim else "MISSED"


def near(share: float) -> bool:
    """Whether realized / predicted is within `REALIZED_AIM` of 1."""
    return abs(share - 1) <= REALIZED_AIM


COLUMNS: tuple[tuple[str, str, Callable[[Outcome], float | str]], ...] = (
    ("monolith", ".1f", lambda o: o.monolith.rate),
    ("threaded", ".1f", lambda o: o.threaded.rate if o.threaded else math.nan),
    ("predicted", ".1f", lambda o: o.plan.fitted.throughput),
    ("pred run", ".1f", lambda o: o.predicted_run),
    ("realized", ".1f", lambda o: o.realized),
    ("steady", ".1f", lambda o: o.planned.typical().steady),
    ("real/pred", ".2f", lambda o: o.realized_share),
    ("stdy/pred", ".2f", lambda o: o.planned.typical().steady / o.plan.fitted.throughput),
    ("plan e2e", ".1f", lambda o: o.planned.rate),
    ("best hand", ".1f", lambda o: o.hand.rate),
    ("plan/hand", ".2f", lambda o: o.hand_share),
    ("plan/mono", ".2f", lambda o: o.planned.rate / o.monolith.rate),
    ("plan/best", ".2f", lambda o: o.best_share),
    ("luckiest", ".2f", lambda o: o.luckiest_share),
    ("range", "", lambda o: "{:.0f}-{:.0f}{}".format(*o.plan.fitted.throughput_range,
                                                      "" if o.in_range else "!")),
    ("p@load", ".1f", lambda o: o.at_run_load),
    ("real/p@l", ".2f", lambda o: o.realized / o.at_run_load),
    ("speed", ".2f", lambda o: o.speed),
    ("others", ".2f", lambda o: o.others),
    ("busy", "", lambda o: o.disturbed),
)


HELD_OUT_AT = "3667fd149aa8355a4751831bf1c379eb5a244650"  # the commit bench/heldout/ froze at
TITLES = {False: "trained shapes (this file's: the model was tuned on or changed for them)",
          True: f"HELD-OUT shapes (bench/heldout/, frozen at commit {HELD_OUT_AT[:7]}, "
                "shapes added since each in a commit of its own; never used to change the "
                "model)"}


def table(outcomes: Sequence[Outcome], cores: float, rounds: int) -> None:
    """The summary: a table of the figures, then each contender's configuration."""
    print(f"\nfit quality on this host: {cores:g} cores (os.cpu_count {os.cpu_count()}); "
          f"load average {os.getloadavg()[0]:.2f} at the end; the median of {rounds} "
          "alternating runs per contender; items/s end to end (start-up included) unless "
          "said")
    _rows(outcomes)
    _column_notes()
    _configurations(outcomes)
    _aims(outcomes)
    print("Noisy: on a shared 2-core host single runs move by 10% or more, more when "
          "others' cores are high")


def _rows(outcomes: Sequence[Outcome]) -> None:
    """Per set (trained, held out): a row of figures per pipeline, and one for its --adapt run."""
    def row(name: str, o: Outcome, extra: str = "") -> None:
        cells = "".join(f" {value(o):>9{spec}}" for _, spec, value in COLUMNS)
        twins = [c for c in o.finalists if c.label in BASELINE_KINDS
                 and c.key == o.layout_key and o.planned.key == o.layout_key]
        same = "".join(f"; pooled with [{c.config}], the same layout" for c in twins)
        print(f"{name:<14}{cells}  {'met' if near(o.realized_share) else 'MISSED'}, "
              f"{verdict(o.best_share, HAND_AIM)}{same}{extra}")

    for held_out in (False, True):
        group = [o for o in outcomes if o.spec.held_out == held_out]
        if not group:
            continue
        print(f"\n{TITLES[held_out]}:")
        print(f"{'pipeline':<14}" + "".join(f" {name:>9}" for name, _, _ in COLUMNS)
              + f"  aims: real/pred within ±{REALIZED_AIM:.0%}, plan/best >= {HAND_AIM}")
        for o in group:
            row(o.spec.name, o)
            if o.adapted is not None and o.adapted.runs:
                refits = [r for run in o.adapted.runs for r in run.record.refits]
                changed = sum(r.after != r.before for r in refits)
                adapted = o.adapted.placement
                assert isinstance(adapted, Plan)
                row("  --adapt", replace(o, planned=o.adapted, plan=adapted,
                                         at_run_load=o.adapted_at_run_load),
                    f"; re-fits {len(refits)} ({changed} changed the layout)")


def _column_notes() -> None:
    """What each column is."""
    print("columns: every figure is a contender's median run; monolith = the best of its "
          "process-count sweep; threaded = the best threaded monolith (P processes x N threads); "
          "predicted = the plan's steady items/s; pred run = what it predicts for a run of that "
          "many items (its replicas' builds and the first item's way through added: "
          "Plan.run_rate); realized = the median of its runs' records (completed / run wall), "
          "real/pred = realized over pred run; steady = its median run between 10% and 90% of "
          "items done; plan e2e, best hand = items/s end to end; plan/best = the plan over the "
          "best baseline of another layout (a baseline that ran the plan's own layout is pooled "
          "with the plan's runs); luckiest = the plan's fastest run over any other layout's "
          "fastest (the old best-of figure, which favours the side with more runs); others = "
          "median cores used by other processes on the host during the final runs; p@load = the "
          "model's prediction from the same profile at the load others (and the loopback "
          "service, which no profile sees) put on the host during the plan's median run, "
          "real/p@l = realized over it (the model's "
          f"error apart from the host's load moving); speed = a fixed CPU probe's speed "
          "before and after each of the plan's runs over its speed before the profile (the "
          "host's moment: "
          "under 1, slower than the profile saw it); range = the plan's predicted p10-p90 "
          "steady items/s, '!' where the median run's steady rate fell outside it; busy = final "
          f"runs during which others "
          f"used {QUIET_CORES} cores or more")


def _configurations(outcomes: Sequence[Outcome]) -> None:
    """Each contender's configuration and median items/s, and the shapes left out."""
    print("configurations (each contender's median items/s, end to end):")
    for o in outcomes:
        print(f"  {o.spec.name:<14} plan [{o.planned.config}] {o.planned.rate:.1f}; "
              f"best hand [{o.hand.config}] {o.hand.rate:.1f}; monolith "
              f"[{o.monolith.config}] {o.monolith.rate:.1f}"
              + (f"; threaded [{o.threaded.config}] {o.threaded.rate:.1f}"
                 if o.threaded else "")
              + f"; best other layout [{o.best_rival.config}] {o.best_rival.rate:.1f}")
        for c in o.finalists:
            if c.label == "what-if":
                print(f"  {'':<14} what-if [{c.config}] {c.rate:.1f} (predicted "
                      f"{_predicted(c):.1f}, record {c.typical().record.throughput:.1f})")
    for name in SKIPPED:
        print(f"  {name}: skipped, {SKIPPED[name]}")


def _aims(outcomes: Sequence[Outcome]) -> None:
    """Per set, how many pipelines met each aim."""
    for held_out in (False, True):
        group = [o for o in outcomes if o.spec.held_out == held_out]
        met = sum(near(o.realized_share) for o in group)
        won = sum(o.best_share >= HAND_AIM for o in group)
        inside = sum(o.in_range for o in group)
        ties = [o for o in group if o.set_aside is not None]
        if not group:
            continue
        which = "HELD OUT" if held_out else "trained"
        print(f"aims ({which}): realized within ±{REALIZED_AIM:.0%} "
              f"of predicted on {met}/{len(group)}; plan >= {HAND_AIM} x best baseline on "
              f"{won}/{len(group)}; steady inside the plan's p10-p90 range on "
              f"{inside}/{len(group)}; the tie rule's choice at least 1 - uncertainty x the "
              f"side it set aside on {sum(o.tie_held for o in ties)}/{len(ties)} ties ("
              + ", ".join(f"{o.spec.name} {o.tie_share:.2f}" for o in ties) + ")")
