"""Real torch: a dict of hook handles in the class body, keyed by name
(HKL305).  Refusing a key any instance holds, and removing by key, keeps each
instance's hooks its own (sparseml's LayerParamMasking, quiet); without the
refusal, a second instance overwrites the first's handle, and that hook can
then never be removed (reported)."""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES, codes_at, lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl305_shared_hook_handles.py"


def _line(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)


def test_a_registry_that_refuses_held_keys_keeps_each_instances_hooks():
    classes = runpy.run_path(str(FIXTURE))
    first, second = classes["MaskRegistry"](), classes["MaskRegistry"]()
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    first.add_mask("a", a)
    with pytest.raises(ValueError):
        second.add_mask("a", b)  # the key another instance holds is refused
    second.add_mask("b", b)
    second.remove_mask("b")
    assert len(a._forward_hooks) == 1 and len(b._forward_hooks) == 0  # only its own hook went
    first.remove_mask("a")
    assert len(a._forward_hooks) == 0
    source = FIXTURE.read_text(encoding="utf-8")
    assert (_line(source, "_forward_hooks: dict = {}"), "HKL305") not in codes_at(lint(source, "HKL305"))


def test_without_the_refusal_the_first_instances_hook_can_never_be_removed():
    classes = runpy.run_path(str(FIXTURE))
    first, second = classes["NamedRecorder"](), classes["NamedRecorder"]()
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    first.watch("encoder", a)
    second.watch("encoder", b)  # overwrites the handle of `a`'s hook
    first.unwatch("encoder")  # removes `b`'s hook, not its own
    assert len(a._forward_hooks) == 1 and len(b._forward_hooks) == 0
    source = FIXTURE.read_text(encoding="utf-8")
    assert (_line(source, "hooks = {}  # HKL305"), "HKL305") in codes_at(lint(source, "HKL305"))
