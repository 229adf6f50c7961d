"""Modules whose forward visibly returns a tuple, and hooks that read that output as a tensor.

A forward hook's ``output`` is exactly what the module's ``forward``
returned.  For some modules that is always a tuple, whatever the input:
``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` return ``(output, h_n)`` (the LSTM's
``h_n`` a further ``(h, c)`` pair), ``nn.LSTMCell`` returns ``(h, c)``,
``nn.MultiheadAttention`` returns ``(attn_output, attn_weights)`` (the
weights ``None`` with ``need_weights=False``), ``AdaptiveLogSoftmaxWithLoss``
a named tuple, a max-pooling layer built with ``return_indices=True``
``(values, indices)``; a class of the file whose every ``return`` in
``forward`` is a tuple display.  A hook on such a module that calls a
tensor method on ``output`` raises ``AttributeError`` the first time it
fires (verified in tests/behaviour/test_tuple_output_hooks.py).

The modules are known from the registration's receiver (a constructor
call, an attribute set from one, an ``isinstance`` test around the
registration) or from a branch of the hook body that tests the module
parameter (``if isinstance(module, nn.LSTM): output.detach()``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.static.flow import executed_nodes
from hooklint.static.hook_arguments import TENSOR_ONLY, _rebound, _tested
from hooklint.static.semantic import ClassInfo, FunctionNode

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext
    from hooklint.static.hooks import Registration

# torch.nn classes whose forward returns a tuple on every call (tests/behaviour/test_tuple_output_hooks.py).
ALWAYS_TUPLE = {
    "LSTM": "`(output, (h_n, c_n))`",
    "GRU": "`(output, h_n)`",
    "RNN": "`(output, h_n)`",
    "LSTMCell": "`(h_1, c_1)`",
    "MultiheadAttention": "`(attn_output, attn_weights)`",
    "AdaptiveLogSoftmaxWithLoss": "a named tuple `(output, loss)`",
}
# torch.nn classes that return a tuple when built with `return_indices=True`.
TUPLE_WITH_INDICES = frozenset({
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    "FractionalMaxPool2d", "FractionalMaxPool3d",
})


@dataclass(frozen=True)
class TupleOutputRead:
    node: ast.Attribute  # `output.detach`
    module: str  # "`nn.LSTM` ((output, (h_n, c_n)))"
    where: str  # "registered on `self.rnn`" / "in the branch `isinstance(module, nn.GRU)`"


def tuple_returning(ctx: "FileContext", value) -> str | None:
    """Words for the tuple a module value's forward returns, or None when
    not every class it can be returns one."""
    if value is None:
        return None
    local = getattr(value, "local_class", None)
    torch_class = getattr(value, "torch_class", None)
    narrowing = getattr(value, "narrowing", None)
    if local is not None:
        return _local_tuple(ctx, local)
    if narrowing is not None:
        if narrowing.by_name or not (narrowing.classes or narrowing.local):
            return None
        words = [_torch_tuple(qual, None) for qual in narrowing.classes] + \
                [_local_tuple(ctx, info) for info in narrowing.local]
        if any(w is None for w in words):
            return None
        return " or ".join(words)  # type: ignore[arg-type]
    if torch_class:
        return _torch_tuple(torch_class, getattr(value, "call", None))
    return None


def _torch_tuple(qual: str, call: ast.Call | None) -> str | None:
    if not qual.startswith("torch.nn."):
        return None
    name = qual.rsplit(".", 1)[-1]
    if name in ALWAYS_TUPLE:
        return f"`nn.{name}` (it returns {ALWAYS_TUPLE[name]})"
    if name in TUPLE_WITH_INDICES and call is not None and any(
            k.arg == "return_indices" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in call.keywords):
        return f"`nn.{name}(return_indices=True)` (it returns `(values, indices)`)"
    return None


def _local_tuple(ctx: "FileContext", info: ClassInfo) -> str | None:
    """A class of the file whose own ``forward`` returns a tuple display on
    every path, and no class of the file derived from it overrides ``forward``."""
    forward = info.method("forward")
    if forward is None or not isinstance(forward, FunctionNode):
        return None
    cfg = ctx.core.cfg(forward)
    if cfg.falls_off_end():
        return None
    returns = [r for r in executed_nodes(forward) if isinstance(r, ast.Return) and ctx.core.can_run(r)]
    if not returns or not all(isinstance(r.value, ast.Tuple) and len(r.value.elts) >= 2 for r in returns):
        return None
    for other in ctx.model.classes.values():
        if other is not info and info.name in [b.rsplit(".", 1)[-1] for b in other.bases if b] \
                and other.method("forward") is not None:
            return None
    sizes = sorted({len(r.value.elts) for r in returns})  # type: ignore[union-attr]
    return f"`{info.name}` (its `forward` returns a {'/'.join(map(str, sizes))}-tuple)"


def tuple_output_reads(ctx: "FileContext", reg: "Registration") -> list[TupleOutputRead]:
    """Tensor reads of ``output`` in a forward hook whose module returns a tuple."""
    hook = reg.hook
    if hook is None or hook.has_varargs or not isinstance(hook.node, FunctionNode + (ast.Lambda,)):
        return []
    output = reg.param("output")
    if output is None or _rebound(hook.node, output) or _tested(hook.node, output):
        return []
    uses = [node.__dict__.get("_hl_parent") for node in executed_nodes(hook.node)
            if isinstance(node, ast.Name) and node.id == output and isinstance(node.ctx, ast.Load)]
    uses = [u for u in uses if isinstance(u, ast.Attribute) and u.attr in TENSOR_ONLY
            and isinstance(u.value, ast.Name) and u.value.id == output]
    if not uses:
        return []
    receiver = tuple_returning(ctx, reg.receiver_value)
    if receiver is not None:
        return [TupleOutputRead(uses[0], receiver, f"registered on {reg.receiver_text}")]
    module = reg.param("module")
    if module is None:
        return []
    out: list[TupleOutputRead] = []
    for use in uses:
        narrowing = ctx.inference.identity.narrowing_of(use, module)
        if narrowing is None:
            continue
        from hooklint.static.values import ModuleValue

        words = tuple_returning(ctx, ModuleValue(narrowing=narrowing))
        if words is not None:
            out.append(TupleOutputRead(use, words, f"in the branch of `{ast.unparse(narrowing.test)}`"))
            break
    return out
