"""Real torch: what HKL349 claims about forward hooks that keep a running total of graph-attached values.

A total rebound to `total + value(output)` in a forward hook becomes a node
whose inputs are the old total and this forward's graph: after N training
steps it reaches back through all N graphs (they stay alive), and a backward
through it after the steps' own backwards raises.  The fixed twins keep one
forward's graph (the old total detached) or none (`torch.no_grad()`).
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.hook_accumulates_autograd_graph import HookAccumulatesAutogradGraph

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl349_hook_accumulates_autograd_graph.py"


def _namespace() -> dict:
    ns: dict = {"__name__": "hkl349_fixture"}
    exec(compile(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE), "exec"), ns)  # noqa: S102
    return ns


def _graph_nodes(tensor) -> int:
    """Autograd nodes reachable from the tensor: what its graph keeps alive."""
    seen: set[int] = set()
    stack = [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return len(seen)


def _train(model, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        model(torch.randn(4, 6)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2))


def test_rule_reports_the_four_fixture_totals():
    rows = sorted(f.location.row for f in lint(FIXTURE.read_text(encoding="utf-8"), HookAccumulatesAutogradGraph.code))
    assert rows == [16, 47, 69, 123]


def test_running_total_keeps_every_steps_graph():
    ns = _namespace()
    sizes = []
    for steps in (1, 3, 6):
        model = _model()
        ns["attach_rate_hooks"](model)
        _train(model, steps)
        total = model[1].rate_per_neuron
        assert total.requires_grad
        sizes.append(_graph_nodes(total))
    # each step adds its forward's nodes (Linear, ReLU, mean, add): the graph grows linearly with the steps
    assert sizes[0] < sizes[1] < sizes[2]
    assert sizes[2] - sizes[1] == 3 * (sizes[1] - sizes[0]) // 2


def test_backward_through_the_total_after_the_steps_raises():
    ns = _namespace()
    model = _model()
    ns["attach_rate_hooks"](model)
    _train(model, 2)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        model[1].rate_per_neuron.sum().backward()


def test_ops_counter_and_collector_spellings_keep_graphs_too():
    ns = _namespace()
    model = _model()
    stats = ns["attach_ops_counters"](model)
    collector = ns["ActivationEnergy"](model[1])
    _train(model, 1)
    one = (_graph_nodes(stats["2"]["ops"]), _graph_nodes(collector.energy))
    _train(model, 3)
    # the second Linear's input is the ReLU's output, part of the graph (the first layer's input is data)
    assert _graph_nodes(stats["2"]["ops"]) > one[0] > 0
    assert _graph_nodes(stats["0"]["ops"]) == 0
    assert _graph_nodes(collector.energy) > one[1]
    assert stats["2"]["samples"] == 16


def test_in_place_add_on_a_buffer_chains_the_graphs_too():
    ns = _namespace()
    model = _model()
    meter = ns["ChannelEnergy"](model[0])
    assert not meter.energy.requires_grad
    _train(model, 1)
    one = _graph_nodes(meter.energy)
    _train(model, 3)
    assert meter.energy.requires_grad and _graph_nodes(meter.energy) > one > 0
    assert int(meter.batches) == 4


def test_fixed_twins_keep_one_graph_or_none():
    ns = _namespace()
    model = _model()
    ns["attach_rate_hooks_fixed"](model)
    no_grad = ns["ActivationEnergyNoGrad"](model[1])
    _train(model, 1)
    one_step = _graph_nodes(model[1].rate_per_neuron)
    _train(model, 5)
    assert _graph_nodes(model[1].rate_per_neuron) == one_step  # only the last forward's graph
    assert model[1].batches == 6
    assert not no_grad.energy.requires_grad and no_grad.calls == 6


def test_per_step_penalty_reset_by_its_consumer_keeps_one_step():
    ns = _namespace()
    model = _model()
    penalty = ns["ActivationPenalty"](model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sizes = []
    for _ in range(3):
        out = model(torch.randn(4, 6)).pow(2).mean()
        reg = penalty.pop()
        sizes.append(_graph_nodes(reg))
        (out + 0.1 * reg).backward()
        opt.step()
        opt.zero_grad()
    assert sizes[0] == sizes[1] == sizes[2]
    penalty.remove()
