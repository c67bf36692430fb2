"""What Ray replicas ask for: default cores shared out to fit the nodes, declared ones held."""

from __future__ import annotations

import pytest

from fitwork import Pipeline, unit
from fitwork.engine.ray.asks import Ask, never_placed, share
from fitwork.errors import EngineError


def default(name: str, replicas: int = 1) -> Ask:
    return Ask(name, replicas, {"CPU": 1.0}, fixed=False)


def test_five_default_units_share_two_cores() -> None:
    asks = [default(n) for n in "abcde"]
    assert share(asks, [{"CPU": 2.0}]) == pytest.approx(0.4)


def test_a_default_never_asks_more_than_one_core() -> None:
    assert share([default("a", 3)], [{"CPU": 16.0}]) == 1.0


def test_shares_fit_each_node_not_just_the_total() -> None:
    # three 1-core nodes, two replicas: 1.5 cores each would add up but fit on no node
    assert share([default("a", 2)], [{"CPU": 1.0}] * 3) == 1.0
    assert share([default("a", 4)], [{"CPU": 1.0}] * 3) == pytest.approx(0.5)


def test_declared_asks_come_first_and_defaults_share_the_rest() -> None:
    fixed = Ask("big", 1, {"CPU": 1.5}, fixed=True)
    assert share([fixed, default("a", 2)], [{"CPU": 2.0}]) == pytest.approx(0.25)
    whole = Ask("all", 1, {"CPU": 2.0}, fixed=True)
    assert share([whole, default("a")], [{"CPU": 2.0}]) == 0.0


def test_an_ask_no_node_holds_fails_naming_unit_ask_cluster_and_fix() -> None:
    nodes = [{"CPU": 2.0}, {"CPU": 4.0, "GPU": 1.0}]
    never_placed([Ask("fits", 2, {"CPU": 4.0, "GPU": 1.0}, fixed=True)], nodes)
    never_placed([Ask("shared", 9, {"CPU": 64.0}, fixed=False)], nodes)  # shared out
    with pytest.raises(EngineError) as raised:
        never_placed([Ask("train", 1, {"CPU": 64.0}, fixed=True)], nodes)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("unit 'train' asks Ray for 64 CPU per replica (as declared)")
    assert "the most any node has is 4 CPU, the whole cluster 6 CPU on 2 nodes" in message
    assert "--cpus train=N" in message
    with pytest.raises(EngineError, match=r"asks Ray for 2 GPU.*plan for this cluster"):
        never_placed([Ask("model", 1, {"GPU": 2.0}, fixed=True, origin="plan")], nodes)


def test_a_unit_says_whether_its_cpu_was_declared() -> None:
    def f(x: int) -> int:
        return x

    def g(x: int) -> int:
        return x

    assert not unit(f).cpu_given and not Pipeline(f).units[0].cpu_given
    assert unit(cpu=1)(f).cpu_given and unit(cpu=0.5)(f).cpu_given
    assert not unit(gpu=1)(f).cpu_given  # the GPU is declared, the core is the default
    assert not unit(replicas=3)(f).cpu_given
    assert not Pipeline(f, g, name="p").fused().units[0].cpu_given
    assert Pipeline(f, unit(cpu=2)(g), name="p").fused().units[0].cpu_given


def test_a_ray_prediction_prices_start_up_and_calls() -> None:
    from fitwork.engine.ray import costs
    from fitwork.engine.ray.driver import FRAME_TIME

    assert costs.FRAME_TIME == FRAME_TIME  # the frames the driver sizes are the ones priced
    steady = costs.steady_rate(1000.0, 3)
    assert steady == pytest.approx(1000.0 / (1 + 3 * costs.CALL_CPU_S / costs.FRAME_TIME))
    # a short run is mostly start-up; a long one comes near the steady rate
    short = costs.predicted(1000.0, 1000, replicas=4, units=3, cores=2.0)
    long = costs.predicted(1000.0, 10**7, replicas=4, units=3, cores=2.0)
    start = costs.startup_seconds(4, 2.0)
    assert short == pytest.approx(1000 / (start + 1000 / steady))
    assert short < 0.5 * steady and long == pytest.approx(steady, rel=1e-3)


def test_cores_set_for_a_run_are_declared_and_estimated_ones_are_not() -> None:
    from fitwork import decompose
    from fitwork.commands.options import UnitSettings

    def f(x: int) -> int:
        return x

    def g(x: int) -> int:
        return x

    set_here = UnitSettings(cpus={"f": 0.5}).apply(Pipeline(f, g, name="p"))
    assert set_here.unit_named("f").cpu_given and not set_here.unit_named("g").cpu_given

    def body(x: int) -> int:
        y = x + 1
        return y * 2

    assert not any(u.cpu_given for u in decompose(body).units)
