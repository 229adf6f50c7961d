"""Real torch: a hook on an autograd Node that refers to an object keeping the
Node (or its tensor) makes a cycle `gc.collect()` never frees (HKL329), while
a weak reference, a removed handle or a hook on a leaf tensor lets the object
go.  The shapes are those of fixtures/rules/hkl329_node_hook_reference_cycle.py
(gpytorch's cached tensors hooked with a partial of the strategy), and an
AccumulateGrad Node kept in a list through its Python object is collected
(why the rule leaves DeepSpeed's shape alone).
"""

from __future__ import annotations

import functools
import gc
import weakref

import pytest
from conftest import lint

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def _reset(owner, *args):
    return None


class Strategy:
    def cache(self, t):
        self.kept = t
        t.grad_fn.register_hook(functools.partial(_reset, self))


class WeakStrategy:
    def cache(self, t):
        self.kept = t
        t.grad_fn.register_hook(functools.partial(_reset, weakref.ref(self)))


class HandleStrategy:
    def cache(self, t):
        self.kept = t
        self.handle = t.grad_fn.register_hook(functools.partial(_reset, self))

    def close(self):
        self.handle.remove()


class Recorder:
    def record(self, layers, x):
        self.outputs = []
        for layer in layers:
            x = layer(x)
            node = x.grad_fn

            def on_backward(*unused):
                self.seen = True

            node.register_hook(on_backward)
            self.outputs.append(x)
        return x


class ZeroOptimizer:
    def hook(self, params):
        self.grad_accs = []
        for p in params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]

            def reduce(*unused, p=p):
                self.reduced = p

            acc.register_hook(reduce)
            self.grad_accs.append(acc)


class LeafWatcher:
    def watch(self, w):
        self.w = w
        w.register_hook(lambda g: self)


def _survives(make) -> bool:
    """Whether the object ``make`` builds is still alive after the program drops it and gc runs."""
    obj = make()
    ref = weakref.ref(obj)
    del obj
    gc.collect()
    return ref() is not None


def _cached_tensor(cls):
    def make():
        obj = cls()
        w = torch.ones(3, requires_grad=True)
        obj.cache(w * 2)
        return obj
    return make


def test_node_hook_partial_of_owner_is_never_collected():
    assert _survives(_cached_tensor(Strategy))


def test_closure_over_owner_keeping_outputs_is_never_collected():
    layers = [torch.nn.Linear(2, 2) for _ in range(3)]

    def make():
        rec = Recorder()
        rec.record(layers, torch.ones(1, 2))
        return rec

    assert _survives(make)


def test_accumulate_grad_nodes_kept_by_their_python_objects_are_collected():
    # why HKL329 leaves next_functions Nodes alone: the collector traverses a
    # Node whose Python object is its only owner
    params = [torch.nn.Parameter(torch.ones(2)) for _ in range(3)]

    def make():
        opt = ZeroOptimizer()
        opt.hook(params)
        return opt

    assert not _survives(make)


def test_weak_reference_lets_the_owner_go():
    assert not _survives(_cached_tensor(WeakStrategy))


def test_removed_handle_lets_the_owner_go():
    def make():
        obj = _cached_tensor(HandleStrategy)()
        obj.close()
        return obj
    assert not _survives(make)


def test_leaf_tensor_hook_cycle_is_collected():
    def make():
        obj = LeafWatcher()
        obj.watch(torch.ones(3, requires_grad=True))
        return obj
    assert not _survives(make)


def test_rule_reports_the_cycles_and_not_the_twins():
    import inspect
    import textwrap

    head = "import functools, weakref\nimport torch\n" + textwrap.dedent(inspect.getsource(_reset))
    bad = head + "".join(textwrap.dedent(inspect.getsource(c)) for c in (Strategy, Recorder))
    good = head + "".join(textwrap.dedent(inspect.getsource(c))
                          for c in (WeakStrategy, HandleStrategy, LeafWatcher, ZeroOptimizer))
    assert [f.code for f in lint(bad, "HKL329")] == ["HKL329", "HKL329"]
    assert lint(good, "HKL329") == []
