"""Real torch (HKL334), on the fixture's own classes: wrapping a module's
forward on the instance puts `forward` (and, with accelerate's
`add_hook_to_module`, `_hf_hook` and `_old_forward`) in its `__dict__`; a
skip list that leaves them in collects them as the module's properties, and
the collected state no longer pickles.  The fixed twin leaves them out."""

from __future__ import annotations

import functools
import pickle
import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def classes():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl334_instance_state_picks_forward_wrapper.py"))


def _wrap(module):
    original = module.forward

    def traced(*args, **kwargs):
        return original(*args, **kwargs)

    module.forward = traced


def test_a_forward_wrapper_on_the_instance_becomes_a_property(classes):
    quantizer = classes["TensorQuantizer"]()
    assert quantizer.properties() == {"num_bits"}
    _wrap(quantizer)
    assert quantizer.properties() == {"num_bits", "forward"}
    state = {name: quantizer.__dict__[name] for name in quantizer.properties()}
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(state)  # a local wrapper function is no property one can save


def test_the_fixed_skip_list_leaves_the_wrapper_out(classes):
    quantizer = classes["FixedQuantizer"]()
    quantizer.num_bits = 4
    _wrap(quantizer)
    assert quantizer.properties() == {"num_bits"}
    pickle.dumps({name: quantizer.__dict__[name] for name in quantizer.properties()})


def test_accelerate_hook_adds_its_attributes_to_the_instance(classes):
    hooks = pytest.importorskip("accelerate.hooks")
    quantizer = classes["TensorQuantizer"]()
    hooks.add_hook_to_module(quantizer, hooks.ModelHook())
    assert {"_hf_hook", "_old_forward", "forward"} <= quantizer.properties()
    assert isinstance(quantizer.forward, functools.partial)
    fixed = classes["FixedQuantizer"]()
    hooks.add_hook_to_module(fixed, hooks.ModelHook())
    assert fixed.properties() == set()
