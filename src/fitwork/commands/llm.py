"""`fitwork llm`: phase models, traces, the phase-split planner and the replay simulator."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from fitwork.commands.options import chosen
from fitwork.errors import FitworkError

if TYPE_CHECKING:  # imported when a command runs, so `fitwork --help` stays light
    from fitwork.llm.phases import PhaseBook
    from fitwork.llm.plan import LLMPlan, PlanSet
    from fitwork.llm.result import Objective
    from fitwork.llm.sim import SimResult
    from fitwork.llm.trace import Trace


OBJECTIVES: tuple[Objective, ...] = ("max_goodput", "min_cost")


def _fail(message: object) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _book(phase_data: Path | None, framework: str | None = None) -> PhaseBook:
    from fitwork.llm.phases import PhaseBook, default_book, load_phase_csv, load_splitwise

    if phase_data is None and framework is None:
        return default_book()
    rows = load_phase_csv(phase_data, framework=framework) if phase_data is not None else []
    return PhaseBook([*load_splitwise(), *rows], framework=framework)


PHASE_DATA = click.option(
    "--phase-data", type=click.Path(path_type=Path),
    help="Your measured rows, in fitwork's phase CSV format (docs/llm.md); an optional "
         "framework column names each row's serving stack.")
FRAMEWORK = click.option(
    "--framework", default=None,
    help="The serving stack to plan for: only rows of it are fitted (the shipped rows are "
         "splitwise-2023); --phase-data rows without a framework column are taken as it.")


def _trace(ref: str, rate_scale: float) -> Trace:
    from fitwork.llm.trace import load_trace

    trace = load_trace(ref)
    return trace.scaled(rate_scale) if rate_scale != 1.0 else trace


@click.group("llm")
def llm() -> None:
    """LLM serving as units: prefill and decode fitted to GPU types under SLOs, replayed."""


@llm.command("phases")
@PHASE_DATA
@FRAMEWORK
def phases_command(phase_data: Path | None, framework: str | None) -> None:
    """Fitted phase models: fit error per (model, class, TP) and leave-one-class-out."""
    from fitwork.llm.phases import describe_stack, leave_class_out

    try:
        book = _book(phase_data, framework)
        click.echo(f"{'model':<12} {'class':<10} {'TP':>3}  prefill fit error / decode fit error"
                   "  [serving stack]")
        for (model, name, tp), m in book.fitted.items():
            assert m.prefill_error is not None and m.decode_error is not None
            click.echo(f"{model:<12} {name:<10} {tp:>3}  {m.prefill_error.line()} / "
                       f"{m.decode_error.line()}  [{m.stack}]")
        for stack in sorted({m.stack for m in book.fitted.values()}):
            click.echo(f"stack {describe_stack(stack)}")
        for phase, err in book.fit_errors().items():
            click.echo(f"all rows, {phase}: {err.line()}")
        click.echo("leave one class out (roofline transfer from the other class):")
        for (target, source, phase), err in leave_class_out(book.rows).items():
            click.echo(f"  {phase:<8} {source} -> {target}: {err.line()}")
    except FitworkError as exc:
        _fail(exc)


@llm.command("trace")
@click.argument("trace_ref", metavar="TRACE")
@click.option("--rate-scale", type=float, default=1.0, show_default=True)
def trace_command(trace_ref: str, rate_scale: float) -> None:
    """Summarise a trace (shipped: conv, code; or an Azure-format CSV)."""
    try:
        summary = _trace(trace_ref, rate_scale).summary()
    except FitworkError as exc:
        _fail(exc)
    for key, value in summary.items():
        click.echo(f"{key:<14} {value:,.4g}")


def _show(plan: LLMPlan) -> None:
    if not plan.feasible:
        click.echo(f"\n{plan.label}: {plan.bottleneck}")
        return
    cost = f"${plan.cost_per_million_tokens:.3f}" if plan.cost_per_million_tokens else "-"
    click.echo(f"\n{plan.label}: goodput {plan.goodput:.3f} req/s (capacity "
               f"{plan.capacity:.3f} at a steady rate, burst x{plan.burst:.2f}), "
               f"{plan.tokens_per_s:,.0f} tok/s, ${plan.cost_per_hour:.2f}/h, {cost}/Mtok")
    r = plan.replay
    if r is not None:
        held = ", ".join(f"{k} x{v:.2f}" for k, v in sorted(plan.derate.items()))
        verdict = "holds" if r.holds else f"does NOT hold (under {r.target:.0%})"
        ttft_r = f"{r.ttft_p90:.3f}s" if r.ttft_p90 is not None else "-"
        tpot_r = f"{r.tpot_p90 * 1e3:.1f}ms" if r.tpot_p90 is not None else "-"
        click.echo(f"  replayed at {r.rate:.3f} req/s ({r.window}): {r.attained:.1%} within "
                   f"both SLOs, TTFT p90 {ttft_r}, TPOT p90 {tpot_r}: {verdict}, "
                   f"{r.rounds} round(s)"
                   + (f", rates held to {held}" if held else ""))
    ttft = f"{plan.ttft_p90:.3f}s" if plan.ttft_p90 is not None else "-"
    tpot = f"{plan.tpot_p90 * 1e3:.1f}ms" if plan.tpot_p90 is not None else "-"
    click.echo(f"  predicted TTFT p90 {ttft}, TPOT p90 {tpot}")
    if plan.stack:
        click.echo(f"  phase rates describe: {plan.stack}")
    for p in plan.pools:
        click.echo(f"  {p.phase:<9} {p.device_class:<10} TP{p.tp} x{p.replicas:<4} on "
                   f"{p.node_type:<10} max batch {p.max_batch:<4} {p.load:8.3f} req/s "
                   f"[{p.source}] {p.limit}")
    for u in plan.utilization:
        click.echo(f"  {u.device_class:<10} {u.gpus:>5} GPUs  busy {u.busy:.0%}  MFU "
                   f"{u.compute:.0%}  server capacity {u.capacity:.0%}  HBM bandwidth "
                   f"{u.bandwidth:.0%}  memory {u.memory:.0%}")
    click.echo(f"  bottleneck: {plan.bottleneck}")
    if plan.transferred:
        click.echo(f"  transferred (not measured): {'; '.join(plan.transferred)}")


@llm.command("plan")
@click.option("--model", required=True, help="e.g. llama2-70b, bloom-176b")
@click.option("--trace", "trace_ref", required=True,
              help="A shipped trace (conv, code) or an Azure-format CSV.")
@click.option("--fleet", "fleet_ref", required=True,
              help="A fleet YAML, or a shipped one: a100, h100, mixed.")
@click.option("--slo", required=True, help="e.g. ttft_p90=2s,tpot_p90=150ms")
@click.option("--objective", type=click.Choice(OBJECTIVES),
              default="max_goodput", show_default=True)
@click.option("--rate-scale", type=float, default=1.0, show_default=True,
              help="Scale the trace's arrival rate (min_cost serves the scaled rate).")
@click.option("--burst", type=float, default=None,
              help="Provision this factor above the mean rate [default: the trace's "
                   "99th-percentile one-minute rate over its mean]; 1 for a steady rate.")
@PHASE_DATA
@FRAMEWORK
@click.option("--replay-rounds", type=click.IntRange(0, 20), default=None,
              help="Rounds of replay and re-provisioning per plan [default: 8; 0: plan "
                   "from the queue models alone, unchecked].")
@click.option("--time-limit", type=float, default=10.0, show_default=True)
@click.option("--mip-gap", type=float, default=0.01, show_default=True)
@click.option("--output", "-o", "output_path", type=click.Path(path_type=Path),
              help="Write the plans (JSON) here, for `fitwork llm simulate`.")
def plan_command(model: str, trace_ref: str, fleet_ref: str, slo: str, objective: str,
                 rate_scale: float, burst: float | None, phase_data: Path | None,
                 framework: str | None, replay_rounds: int | None, time_limit: float,
                 mip_gap: float, output_path: Path | None) -> None:
    """Fit prefill and decode pools to the fleet under the SLO, beside colocated baselines;
    replay each plan at the rate it promises and re-provision until it holds."""
    from fitwork.llm.options import SLO
    from fitwork.llm.plan import load_fleet, plan_llm
    from fitwork.llm.verify import MAX_ROUNDS, plan_held

    try:
        trace = _trace(trace_ref, rate_scale)
        fleet, parsed, book = load_fleet(fleet_ref), SLO.parse(slo), _book(phase_data, framework)
        rounds = MAX_ROUNDS if replay_rounds is None else replay_rounds
        if rounds:
            plans = plan_held(model, trace, fleet, parsed,
                              objective=chosen(objective, OBJECTIVES),
                              book=book, time_limit=time_limit, mip_gap=mip_gap, burst=burst,
                              rounds=rounds)
        else:
            plans = plan_llm(model, trace, fleet, parsed,
                             objective=chosen(objective, OBJECTIVES),
                             book=book, time_limit=time_limit, mip_gap=mip_gap, burst=burst)
    except FitworkError as exc:
        _fail(exc)
    click.echo(f"{model} on {fleet_ref}, trace {trace.name} ({len(trace):,} requests, "
               f"{trace.rate:.3f}/s), SLO {SLO.parse(slo).text()}, {objective}")
    _show(plans.split)
    for p in plans.colocated:
        _show(p)
    best = plans.best_colocated()
    if best.goodput > 0:
        split_cost = plans.split.cost_per_million_tokens or 0.0
        click.echo(f"\nphase-split vs best colocated ({best.label}): goodput x"
                   f"{plans.split.goodput / best.goodput:.2f}, cost per token x"
                   f"{split_cost / (best.cost_per_million_tokens or 1.0):.2f}")
    if output_path is not None:
        output_path.write_text(plans.model_dump_json(indent=1), encoding="utf-8")
        click.echo(f"plans written to {output_path}")


def _load_plans(plan_path: Path) -> PlanSet:
    """The plans `fitwork llm plan -o` wrote, or one line naming the file."""
    from pydantic import ValidationError

    from fitwork.llm.phases import LLMInputError
    from fitwork.llm.plan import PlanSet

    try:
        return PlanSet.model_validate_json(plan_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LLMInputError(f"{plan_path}: cannot read: {exc.strerror or exc}") from None
    except ValidationError as exc:
        raise LLMInputError(f"{plan_path}: not a plan file from `fitwork llm plan -o` "
                            f"({exc.error_count()} validation errors)") from None


@llm.command("simulate")
@click.argument("plan_path", metavar="PLAN", type=click.Path(path_type=Path))
@click.option("--trace", "trace_ref", required=True)
@click.option("--rate-scale", type=float, default=1.0, show_default=True)
@click.option("--at-goodput", is_flag=True,
              help="Scale the trace to each plan's planned goodput instead.")
@click.option("--which", type=click.Choice(["split", "colocated", "all"]), default="all",
              show_default=True, help="Replay the split plan, the best colocated one, or both.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the replay figures as JSON.")
def simulate_command(plan_path: Path, trace_ref: str, rate_scale: float, at_goodput: bool,
                     which: str, seed: int, as_json: bool) -> None:
    """Replay a trace through the plans `fitwork llm plan -o` wrote; plan beside replay."""

    from fitwork.llm.sim import compare, simulate_llm

    try:
        plans = _load_plans(plan_path)
        trace = _trace(trace_ref, rate_scale)
        chosen = {"split": [plans.split], "colocated": [plans.best_colocated()],
                  "all": [plans.split, plans.best_colocated()]}[which]
        out = []
        for plan in chosen:
            run = trace.scaled(plan.goodput / trace.rate) if at_goodput else trace
            sim = simulate_llm(plan, run, seed=seed)
            out.append(sim)
            if not as_json:
                click.echo(f"\n{plan.label} replaying {run.name} ({len(run):,} requests, "
                           f"seed {seed}, {sim.wall_s:.2f}s)")
                for line in compare(plan, sim):
                    click.echo(f"  {line}")
                for p in sim.pools:
                    click.echo(f"  {p.phase:<9} {p.device_class:<10} TP{p.tp} x{p.replicas:<4} "
                               f"busy {p.busy:.0%} MFU {p.compute:.0%} server capacity "
                               f"{p.capacity:.0%} HBM bandwidth {p.bandwidth:.0%}"
                               + (f" (carried {p.over_plan:.2f}x its planned rate: the plan "
                                  "under-predicted this pool's load)"
                                  if p.over_plan > 1.005 else ""))
    except FitworkError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps([s.model_dump() for s in out], indent=1))


def _replays(plan_path: Path, trace_ref: str, rate_scale: float, at_goodput: bool,
             seed: int) -> tuple[list[LLMPlan], list[SimResult]]:
    """The split plan and the best colocated one (the feasible ones) replayed, values kept."""
    from fitwork.llm.sim import simulate_llm

    plans = _load_plans(plan_path)
    trace = _trace(trace_ref, rate_scale)
    chosen = [p for p in (plans.split, plans.best_colocated()) if p.feasible]
    if not chosen:
        from fitwork.llm.phases import LLMInputError

        raise LLMInputError(f"{plan_path}: no feasible plan to replay")
    sims = [simulate_llm(p, trace.scaled(p.goodput / trace.rate) if at_goodput else trace,
                     seed=seed, keep_values=True) for p in chosen]
    return chosen, sims


@llm.command("report")
@click.argument("plan_path", metavar="PLAN", type=click.Path(path_type=Path))
@click.option("--trace", "trace_ref", required=True)
@click.option("--rate-scale", type=float, default=1.0, show_default=True)
@click.option("--at-goodput", is_flag=True,
              help="Scale the trace to each plan's planned goodput instead.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--output", "-o", "output_path", type=click.Path(path_type=Path), required=True)
def report_command(plan_path: Path, trace_ref: str, rate_scale: float, at_goodput: bool,
                   seed: int, output_path: Path) -> None:
    """Replay the split plan and the best colocated one; write the HTML LLM report (the
    section `fitwork report --llm` adds to a run report, on a page of its own)."""

    from fitwork.llm.report import render_llm_report

    try:
        chosen, sims = _replays(plan_path, trace_ref, rate_scale, at_goodput, seed)
    except FitworkError as exc:
        _fail(exc)
    output_path.write_text(render_llm_report(chosen, sims), encoding="utf-8")
    click.echo(f"report written to {output_path}")


REPORT_OPTIONS = (
    click.Option(["--llm", "llm_plans"], type=click.Path(path_type=Path), metavar="PLAN",
                 help="Plans from `fitwork llm plan -o`: add the LLM serving section (the "
                      "split plan and the best colocated one replayed on --llm-trace); "
                      "RECORD may then be left out."),
    click.Option(["--llm-trace", "--trace", "llm_trace"], metavar="TRACE",
                 help="The trace the --llm plans replay: conv, code or an Azure-format CSV."),
    click.Option(["--llm-rate-scale", "llm_rate_scale"], type=float, default=1.0,
                 show_default=True, help="Scale that trace's arrival rate."),
    click.Option(["--llm-at-goodput", "llm_at_goodput"], is_flag=True,
                 help="Scale that trace to each plan's planned goodput instead."),
    click.Option(["--llm-seed", "llm_seed"], type=int, default=0, show_default=True,
                 help="Seed of the replay's routing."),
)


def with_llm_section(command: click.Command) -> click.Command:
    """``command`` (`fitwork report`) with `REPORT_OPTIONS`: given ``--llm`` and
    ``--llm-trace``, the plans are replayed here and their `LLMSection` passed to its
    callback as ``llm``."""
    inner = command.callback
    assert inner is not None

    def callback(llm_plans: Path | None, llm_trace: str | None, llm_rate_scale: float,
                 llm_at_goodput: bool, llm_seed: int, **kwargs: object) -> object:
        section = None
        if (llm_plans is None) != (llm_trace is None):
            raise click.UsageError("give --llm PLAN and --llm-trace TRACE together")
        if llm_plans is not None and llm_trace is not None:
            from fitwork.llm.report import llm_report_section

            try:
                plans, sims = _replays(llm_plans, llm_trace, llm_rate_scale, llm_at_goodput,
                                       llm_seed)
            except FitworkError as exc:
                _fail(exc)
            section = llm_report_section(plans, sims)
        return inner(**kwargs, llm=section)

    return click.Command(command.name, callback=callback,
                         params=[*command.params, *REPORT_OPTIONS], help=command.help,
                         short_help=command.short_help, epilog=command.epilog,
                         context_settings=command.context_settings)
