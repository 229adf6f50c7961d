"""Real torch: a wrapper that keeps the caller's module through a conditional
expression and runs `self.module.forward(...)` skips the hooks registered on
that root module, in either branch (HKL303); calling the module runs them.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES
from hooklint.static.checker import check_file

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl303_module_either_branch.py"


@pytest.fixture(scope="module")
def shapes():
    return runpy.run_path(str(FIXTURE))


def _hooked_root():
    root, calls = nn.Sequential(nn.Linear(3, 3), nn.ReLU()), []
    root.register_forward_pre_hook(lambda m, args: calls.append("pre"))
    root.register_forward_hook(lambda m, args, out: calls.append("post"))
    root[0].register_forward_hook(lambda m, args, out: calls.append("child"))
    return root, calls


@pytest.mark.parametrize("device", [None, "cpu"], ids=["kept", "moved"])
def test_forward_of_the_root_skips_its_hooks_in_either_branch(shapes, device):
    root, calls = _hooked_root()
    shapes["ShardedWrapper"](root, device=device)(torch.randn(2, 3))
    assert calls == ["child"]  # the root's own pre-hook and hook never ran


@pytest.mark.parametrize("device", [None, "cpu"], ids=["kept", "moved"])
def test_calling_the_module_runs_the_root_hooks(shapes, device):
    root, calls = _hooked_root()
    shapes["CalledWrapper"](root, device=device)(torch.randn(2, 3))
    assert calls == ["pre", "child", "post"]


def test_hooklint_reports_each_bypass_and_not_the_called_twin():
    result = check_file(str(FIXTURE), frozenset({"HKL303"}))
    lines = FIXTURE.read_text().splitlines()
    reported = sorted(lines[f.location.row - 1].strip() for f in result.findings)
    assert reported == ["return net.forward(x)  # HKL303",
                        "return self.inner.forward(x)  # HKL303",
                        "return self.module.forward(*inputs, **kwargs)  # HKL303"]
