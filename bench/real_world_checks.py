"""Reproduce, with real torch, the true findings hooklint reports on the corpus
(docs/real-world.md).  Runs the downloaded packages' own source (read from
the corpus of bench/corpus.py, never copied into this repository).

    python bench/real_world_checks.py
"""

from __future__ import annotations

import ast
import decimal
import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.autograd import Function

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import cache_dir  # noqa: E402


def load_definitions(path: Path, namespace: dict) -> dict:
    """Execute a module's definitions (not its imports: those are provided)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def ibert_identity_gradient(src: Path) -> None:
    """HKL502 on transformers' I-BERT FixedPointMul: the residual gets no gradient."""
    path = src / "transformers-5.23.0/transformers/models/ibert/quant_modules.py"
    logger_module = type("Logging", (), {"get_logger": staticmethod(logging.getLogger)})
    ns = load_definitions(path, {"torch": torch, "nn": nn, "Function": Function, "decimal": decimal, "np": np,
                                 "logging": logger_module, "__name__": "quant_modules"})
    torch.manual_seed(0)
    act = ns["QuantAct"](8, quant_mode=True)
    act.train()
    x = torch.randn(2, 3, 4, requires_grad=True)
    residual = torch.randn(2, 3, 4, requires_grad=True)
    scale = torch.full((4,), 0.05)
    out, _ = act(x, scale, identity=residual, identity_scaling_factor=scale)
    out.sum().backward()
    print(f"I-BERT QuantAct(quant_mode=True), identity=residual: x.grad set: {x.grad is not None}; "
          f"residual.grad: {residual.grad}")

    fn = ns["FixedPointMul"]
    s_identity = torch.full((4,), 0.05, requires_grad=True)
    out = fn.apply(torch.randn(1, 2, 4, requires_grad=True), scale, 8, torch.tensor([0.2]),
                   torch.randn(1, 2, 4, requires_grad=True), s_identity)
    out.sum().backward()
    print(f"FixedPointMul: identity_scaling_factor.grad (should be None or its own gradient): {s_identity.grad}")

    def backward(ctx, grad_output):  # the same values, one per input, identity_grad in identity's slot
        identity_grad = None
        if ctx.identity is not None:
            identity_grad = grad_output.clone() / ctx.z_scaling_factor
        return grad_output.clone() / ctx.z_scaling_factor, None, None, None, identity_grad, None

    fn.backward = staticmethod(backward)
    x.grad = None
    out, _ = act(x, scale, identity=residual, identity_scaling_factor=scale)
    out.sum().backward()
    print(f"with identity_grad in slot 4: residual.grad == x.grad: {torch.equal(residual.grad, x.grad)}")


def legacy_hook_on_linear_and_conv() -> None:
    """HKL101 on torch-pruning's OBDCImportance: what the legacy hook sees."""

    def grad_output_of(make, shape, full):
        torch.manual_seed(0)
        module, seen = make(), {}
        register = module.register_full_backward_hook if full else module.register_backward_hook

        def hook(module, grad_input, grad_output):
            seen["go"] = grad_output[0].clone()

        register(hook)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (module(torch.randn(*shape, requires_grad=True)) ** 2).sum().backward()
        return seen["go"], [str(w.message).split(".")[0] for w in caught]

    for make, shape in ((lambda: nn.Linear(4, 3), (2, 4)), (lambda: nn.Linear(4, 3), (2, 5, 4)),
                        (lambda: nn.Conv2d(3, 2, 3), (1, 3, 5, 5))):
        legacy, caught = grad_output_of(make, shape, full=False)
        full, _ = grad_output_of(make, shape, full=True)
        print(f"{type(make()).__name__} input {shape}: legacy grad_output == full grad_output: "
              f"{torch.equal(legacy, full)}; legacy hook warnings: {caught}")


def main() -> int:
    src = cache_dir() / "src"
    if not (src / "transformers-5.23.0").is_dir():
        print("no corpus: run `python bench/corpus.py --download-only` first", file=sys.stderr)
        return 1
    print(f"torch {torch.__version__}")
    ibert_identity_gradient(src)
    legacy_hook_on_linear_and_conv()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
