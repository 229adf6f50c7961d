"""Real torch: what HKL344 claims, and that the fix it suggests works.

``nn.DataParallel`` needs GPUs (without CUDA it just calls the module, and
``torch.nn.parallel.replicate`` refuses CPU devices), so this test builds the
replicas the way ``replicate`` does on the CPU: one
``Module._replicate_for_data_parallel()`` copy per module (the call
``replicate`` makes; asserted below), with each replica's children pointed
at the replicas of the children.  The replica's forward then runs as a
DataParallel worker thread runs it.

A hook bound to the original wrapper writes into the original's dict.  A
replica that rebinds ``self.hidden = {}`` reads its new dict, which nothing
fills: a ``KeyError``.  The ``clear()`` twin keeps one shared dict and works.
"""

from __future__ import annotations

import inspect
import threading

import pytest

from conftest import lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


class Wrapper(nn.Module):
    def __init__(self, rebind: bool):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        self.rebind = rebind
        self.hidden = {}
        self.net[0].register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self.hidden[args[0].device] = output

    def forward(self, x):
        if self.rebind:
            self.hidden = {}
        else:
            self.hidden.clear()
        self.net(x)
        return self.hidden[x.device]


def _replicate_on_cpu(network):
    """One replica of ``network``, built as ``torch.nn.parallel.replicate`` builds it."""
    modules = list(network.modules())
    index = {id(m): i for i, m in enumerate(modules)}
    copies = [m._replicate_for_data_parallel() for m in modules]
    for module, copy in zip(modules, copies):
        for key, child in module._modules.items():
            copy._modules[key] = None if child is None else copies[index[id(child)]]
        for key, param in module._parameters.items():
            setattr(copy, key, param)
    return copies[0]


def _run_in_thread(replica, x):
    result = {}

    def worker():
        try:
            result["out"] = replica(x)
        except Exception as exc:  # what DataParallel's parallel_apply re-raises
            result["error"] = exc

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    return result


def test_replicate_copies_modules_with_the_shallow_copy_used_here():
    assert "_replicate_for_data_parallel" in inspect.getsource(torch.nn.parallel.replicate)


def test_replica_shares_hooks_bound_to_the_original():
    original = Wrapper(rebind=True)
    replica = _replicate_on_cpu(original)
    assert replica is not original and replica.net[0] is not original.net[0]
    # the replica's layer runs the same hook, bound to the original wrapper
    hooks = list(replica.net[0]._forward_hooks.values())
    assert len(hooks) == 1 and hooks[0].__self__ is original


def test_rebinding_replica_reads_a_dict_the_hook_never_fills():
    original = Wrapper(rebind=True)
    replica = _replicate_on_cpu(original)
    x = torch.randn(5, 4)
    result = _run_in_thread(replica, x)
    assert isinstance(result.get("error"), KeyError)
    # the hook wrote into the original's dict
    assert x.device in original.hidden and original.hidden is not replica.hidden
    # without replicas the same class works
    assert original(x).shape == (5, 3)


def test_clearing_in_place_keeps_one_dict():
    original = Wrapper(rebind=False)
    replica = _replicate_on_cpu(original)
    x = torch.randn(5, 4)
    result = _run_in_thread(replica, x)
    assert "error" not in result and result["out"].shape == (5, 3)
    assert replica.hidden is original.hidden


BUGGY = '''
import torch
from torch import nn

class Wrapper(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.hidden = {}
        self.net[0].register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self.hidden[args[0].device] = output

    def forward(self, x):
        self.hidden = {}
        self.net(x)
        return self.hidden[x.device]
'''

FIXED = BUGGY.replace("self.hidden = {}\n        self.net(x)", "self.hidden.clear()\n        self.net(x)")


def test_rule_reports_the_rebind_and_not_the_clear_twin():
    found = lint(BUGGY, "HKL344")
    assert [(f.code, f.location.row) for f in found] == [("HKL344", 16)]
    assert FIXED != BUGGY
    assert lint(FIXED, "HKL344") == []
