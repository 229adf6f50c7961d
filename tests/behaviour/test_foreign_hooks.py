"""Real torch: a module's hook dict holds every registrant's hooks, so code that
walks it and uses each hook as one of its own breaks on anyone else's hook
(HKL318), and the type-filtered twin does not.  The shape is tensordict
0.3.0's ``select_out_keys`` (fixed in 0.3.1)."""

from __future__ import annotations

import pytest
from conftest import codes_at, lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

SOURCE = '''
import torch.nn as nn


class OutKeys:
    def __init__(self, keys):
        self.keys = keys
        self.owner = None

    def _init(self, module):
        self.owner = module

    def __call__(self, module, inputs, output):
        return output


def select_out_keys(module, *keys):
    module.register_forward_hook(OutKeys(keys))
    for hook in module._forward_hooks.values():
        hook._init(module)
    return module


def select_out_keys_checked(module, *keys):
    module.register_forward_hook(OutKeys(keys))
    for hook in module._forward_hooks.values():
        if isinstance(hook, OutKeys):
            hook._init(module)
    return module
'''


def _namespace() -> dict:
    namespace: dict = {}
    exec(compile(SOURCE, "<snippet>", "exec"), namespace)  # noqa: S102 - our own snippet
    return namespace


def test_a_user_hook_in_the_dict_breaks_the_unchecked_walk():
    ns = _namespace()
    layer = nn.Linear(2, 2)
    layer.register_forward_hook(lambda module, inputs, output: None)  # the user's own hook
    with pytest.raises(AttributeError, match="_init"):
        ns["select_out_keys"](layer, "a")


def test_without_other_hooks_the_unchecked_walk_works():
    ns = _namespace()
    layer = nn.Linear(2, 2)
    ns["select_out_keys"](layer, "a")  # only its own hook: why the bug hides in the library's tests
    assert all(hook.owner is layer for hook in layer._forward_hooks.values())


def test_the_type_filtered_walk_leaves_foreign_hooks_alone():
    ns = _namespace()
    layer = nn.Linear(2, 2)
    calls = []
    layer.register_forward_hook(lambda module, inputs, output: calls.append(1))
    ns["select_out_keys_checked"](layer, "a")
    layer(torch.ones(1, 2))
    assert calls == [1]  # the user's hook still runs
    own = [h for h in layer._forward_hooks.values() if isinstance(h, ns["OutKeys"])]
    assert len(own) == 1 and own[0].owner is layer


def test_linter_reports_the_unchecked_walk_only():
    findings = lint(SOURCE, "HKL318")
    assert codes_at(findings) == [(20, "HKL318")]


EXTRACTOR = '''
import torch.nn as nn


class FeatureExtractor:
    def __init__(self, model, layer):
        self.model = model
        self.features = []
        if not hasattr(self.model, "_ood_handles"):
            setattr(self.model, "_ood_handles", [])
        else:
            for handle in self.model._ood_handles:
                handle.remove()
            self.model._ood_handles = []
        self.model._ood_handles.append(layer.register_forward_hook(self.save))

    def save(self, module, inputs, output):
        self.features.append(output)


class OwnExtractor:
    def __init__(self, model, layer):
        self.model = model
        self.features = []
        self._handles = [layer.register_forward_hook(self.save)]

    def save(self, module, inputs, output):
        self.features.append(output)

    def close(self):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
'''


def _extractors() -> dict:
    namespace: dict = {}
    exec(compile(EXTRACTOR, "<snippet>", "exec"), namespace)  # noqa: S102 - our own snippet
    return namespace


def test_a_second_instance_on_the_same_model_strips_the_first_ones_hooks():
    ns = _extractors()
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    first = ns["FeatureExtractor"](model, model[0])
    second = ns["FeatureExtractor"](model, model[1])  # built on the same model (oodeel's plot after fit)
    model(torch.ones(1, 2))
    assert first.features == []  # silently without its hook
    assert len(second.features) == 1


def test_handles_kept_on_each_instance_leave_the_other_alone():
    ns = _extractors()
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    first = ns["OwnExtractor"](model, model[0])
    second = ns["OwnExtractor"](model, model[1])
    model(torch.ones(1, 2))
    second.close()
    model(torch.ones(1, 2))
    assert len(first.features) == 2 and len(second.features) == 1


def test_linter_reports_the_shared_container_only():
    findings = lint(EXTRACTOR, "HKL319")
    assert codes_at(findings) == [(13, "HKL319")]
