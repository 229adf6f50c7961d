"""Reproduce, with real torch, what the graph layer concluded on the application
repositories (bench/app_repos.py): each verdict it added, removed or sharpened.

    python bench/app_repos_checks.py [--work DIR]

Run after bench/app_repos.py (it exports the repositories into ``--work``), with
the same Python.  Each check builds the model the way the repository's script
does and shows the behaviour the finding claims; it prints PASS or FAIL and the
observation, and the script exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from pathlib import Path
from typing import Callable

import torch
from torch import nn

CHECKS: list[tuple[str, str, Callable[[Path], str]]] = []


def check(repo: str, claim: str):
    def register(fn):
        CHECKS.append((repo, claim, fn))
        return fn

    return register


@contextlib.contextmanager
def imports_from(folder: Path):
    saved_path, saved_modules, saved_cwd = list(sys.path), set(sys.modules), os.getcwd()
    sys.path.insert(0, str(folder))
    os.chdir(folder)
    try:
        yield
    finally:
        sys.path[:] = saved_path
        os.chdir(saved_cwd)
        for name in set(sys.modules) - saved_modules:
            del sys.modules[name]


def full_hook_fails(model: nn.Module, module: nn.Module, x: torch.Tensor) -> str:
    module.register_full_backward_hook(lambda m, gi, go: None)
    try:
        model(x)
    except RuntimeError as exc:
        return str(exc).splitlines()[0][:90]
    return ""


def grad_output_pattern_runs(model: nn.Module, module: nn.Module, x: torch.Tensor) -> bool:
    seen = []

    def forward_hook(mod, inputs, output):
        output.register_hook(seen.append)

    handle = module.register_forward_hook(forward_hook)
    model(x).sum().backward()
    handle.remove()
    return bool(seen)


@check("KFAC-Pytorch", "HKL101 kfac.py:82/ekfac.py:95: a full backward hook on AlexNet's features.0 fails the "
                       "forward (ReLU(inplace=True) after it); the output-tensor pattern works")
def kfac_alexnet(root: Path) -> str:
    with imports_from(root):
        network_utils = importlib.import_module("utils.network_utils")
        net = network_utils.get_network("alexnet", depth=19, num_classes=10, growthRate=12, compressionRate=2,
                                        widen_factor=1, dropRate=0.0)
        error = full_hook_fails(net, net.features[0], torch.randn(2, 3, 32, 32))
        fresh = network_utils.get_network("alexnet", depth=19, num_classes=10, growthRate=12, compressionRate=2,
                                          widen_factor=1, dropRate=0.0)
        assert error and grad_output_pattern_runs(fresh, fresh.features[0], torch.randn(2, 3, 32, 32))
        return f"full hook: {error!r}; pattern: grad_output received"


@check("fullgrad-saliency", "HKL101 tensor_extractor.py:28: a full backward hook on resnet18's bn1 fails the "
                            "forward (ReLU(inplace=True) after it)")
def fullgrad_resnet(root: Path) -> str:
    import torchvision

    model = torchvision.models.resnet18(weights=None)
    error = full_hook_fails(model, model.bn1, torch.randn(2, 3, 224, 224))
    assert error
    return f"full hook: {error!r}"


@check("autograd-hacks", "HKL101 autograd_hacks.py:56: the rename to register_full_backward_hook is safe: same "
                         "grad_output on every Linear and Conv2d of Net and TinyNet, nothing fails")
def autograd_hacks_rename(root: Path) -> str:
    with imports_from(root):
        tests = importlib.import_module("autograd_hacks_test")
        out = []
        for cls, shape in ((tests.Net, (3, 1, 28, 28)), (tests.TinyNet, (3, 1, 32, 32))):
            torch.manual_seed(0)
            x = torch.randn(*shape)
            results = []
            for register in ("register_backward_hook", "register_full_backward_hook"):
                torch.manual_seed(1)
                model = cls()
                seen = {}
                for name, layer in model.named_modules():
                    if type(layer).__name__ in ("Linear", "Conv2d"):
                        getattr(layer, register)(lambda m, gi, go, name=name: seen.__setitem__(name, go[0].clone()))
                model(x).sum().backward()
                results.append(seen)
            assert results[0].keys() == results[1].keys() and results[0]
            assert all(torch.allclose(results[0][k], results[1][k]) for k in results[0])
            out.append(f"{cls.__name__}: {len(results[0])} layers, grad_output equal")
        return "; ".join(out)


@check("pytorch-cnn-visualizations", "HKL102 removed (4 files): the legacy hook's grad_in[0] on AlexNet's "
                                     "features.0 is the gradient of the input image")
def cnn_vis_legacy_safe(root: Path) -> str:
    import torchvision

    model = torchvision.models.alexnet(weights=None)
    seen = []
    model.features[0].register_backward_hook(lambda m, gi, go: seen.append(gi[0]))
    x = torch.randn(1, 3, 224, 224, requires_grad=True)
    model(x)[0, 3].backward()
    assert torch.equal(seen[0], x.grad)
    return "grad_in[0] == image.grad"


@check("pytorch-cnn-visualizations", "HKL101 sharpened (6): a full backward hook on features.0 or on an "
                                     "in-place ReLU of AlexNet fails the forward, so the rename offered "
                                     "statically would break the script")
def cnn_vis_no_rename(root: Path) -> str:
    import torchvision

    model = torchvision.models.alexnet(weights=None)
    conv = full_hook_fails(model, model.features[0], torch.randn(1, 3, 224, 224))
    model = torchvision.models.alexnet(weights=None)
    relu = full_hook_fails(model, model.features[1], torch.randn(1, 3, 224, 224))
    assert conv and relu
    return f"features.0: {conv!r}; features.1 (ReLU): {relu!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "hooklint-app-repos")
    args = parser.parse_args(argv)
    failed = 0
    for repo, claim, fn in CHECKS:
        try:
            observed = fn(args.work / repo)
            print(f"PASS {repo}: {claim}\n     {observed}")
        except Exception as exc:  # noqa: BLE001 - a check that fails is reported, the others still run
            failed += 1
            print(f"FAIL {repo}: {claim}\n     {type(exc).__name__}: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
