"""HKL502: a custom `autograd.Function` gradient in another input's position."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import (
    FUNCTION_TRIGGER_PATTERN,
    FUNCTION_TRIGGERS,
    AutogradFunction,
    autograd_functions,
)
from hooklint.static.context import FileContext
from hooklint.static.flow import executed_nodes
from hooklint.static.semantic import FunctionNode


def _input_for_grad_name(var: str, inputs: list[str]) -> str | None:
    """The forward input a gradient variable is named after: ``grad_bias`` and
    ``bias_grad`` -> ``bias``, ``dx`` / ``d_x`` -> ``x``."""
    if var in inputs:
        return None  # the variable is itself named like an input: no naming scheme to read
    candidates = []
    if var.startswith("grad_"):
        candidates.append(var[5:])
    if var.endswith("_grad"):
        candidates.append(var[:-5])
    if var.startswith("d_"):
        candidates.append(var[2:])
    if var.startswith("d") and len(var) > 1:
        candidates.append(var[1:])
    for cand in candidates:
        if cand in inputs:
            return cand
    return None


class FunctionGradOrder(Rule):
    """
    ## What it does
    In the `backward` of a custom `torch.autograd.Function`, reports:

    - `ctx.needs_input_grad[i]` guarding the computation of a gradient that
      belongs to another input: by its name (`grad_bias`, `bias_grad`,
      `dbias` for the input `bias`) or by the position `backward` returns it
      at;
    - a gradient returned in another input's slot, when its name says which
      input it belongs to (`grad_bias` returned in `location`'s position).

    ## Why is this bad?
    `ctx.needs_input_grad[i]` is the flag of the i-th `forward` input, and the
    i-th returned value is the gradient of the i-th input; nothing else ties a
    gradient to an input.  Seed 002's `LinearFunction.forward(ctx, input,
    weight, location, bias)` tests `needs_input_grad[2]` (`location`, an index
    tensor that never requires grad) before computing the bias gradient, so the
    bias gradient is never computed; it also returns `grad_bias` in
    `location`'s slot.  Running it: `bias.grad` stays `None` after every
    backward, the bias never trains, and torch raises nothing.

    ## Known problems
    Names are matched only when they follow `grad_<input>`, `<input>_grad`,
    `d<input>` or `d_<input>` and the input name exists in `forward`.  Code
    that names gradients otherwise is checked by position only.

    ## Example
    ```python
    import torch

    class Affine(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight)
            return x * weight + bias

        @staticmethod
        def backward(ctx, grad_output):
            x, weight = ctx.saved_tensors
            grad_x = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_x = grad_output * weight
            if ctx.needs_input_grad[1]:
                grad_bias = grad_output
            grad_weight = grad_output * x
            return grad_x, grad_bias, grad_weight
    ```

    ## Use instead
    ```python
    import torch

    class Affine(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight)
            return x * weight + bias

        @staticmethod
        def backward(ctx, grad_output):
            x, weight = ctx.saved_tensors
            grad_x = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_x = grad_output * weight
            if ctx.needs_input_grad[1]:
                grad_weight = grad_output * x
            if ctx.needs_input_grad[2]:
                grad_bias = grad_output
            return grad_x, grad_weight, grad_bias
    ```

    ## Fix safety
    There is no automatic fix: the index or the order may be the intended one
    and the names wrong.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - [`FunctionCtx.needs_input_grad`](https://pytorch.org/docs/stable/autograd.html#context-method-mixins)
    """

    code = "HKL502"
    name = "function-grad-order"
    summary = "A custom autograd Function guards or returns a gradient in another input's position"
    severity = Severity.ERROR
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # a base class's `forward(cls, ctx, ...)`, called by its subclasses' forwards, not by `apply`: its inputs
        # start after `ctx` (liger-kernel's chunked losses)
        "import torch\n"
        "class FusedBase(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(cls, ctx, _input, weight, target, bias=None):\n"
        "        ctx.save_for_backward(_input, weight, bias)\n"
        "        return (_input @ weight.t()).sum()\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_output):\n"
        "        grad_input, grad_weight, grad_bias = ctx.saved_tensors\n"
        "        return grad_input, grad_weight, None, grad_bias\n",
        # the bias gradient computed under the weight's flag in one branch and under its own in the other
        "import torch\n"
        "class Dense(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, weight, bias):\n"
        "        ctx.save_for_backward(x, weight)\n"
        "        return x @ weight.t() + bias\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_output):\n"
        "        x, weight = ctx.saved_tensors\n"
        "        grad_x = grad_output @ weight\n"
        "        if ctx.needs_input_grad[1]:\n"
        "            grad_weight = grad_output.t() @ x\n"
        "            grad_bias = grad_output.sum(0) if ctx.needs_input_grad[2] else None\n"
        "        else:\n"
        "            grad_weight = None\n"
        "            grad_bias = grad_output.sum(0) if ctx.needs_input_grad[2] else None\n"
        "        return grad_x, grad_weight, grad_bias\n",
        # the PyTorch docs' LinearFunction
        "import torch\n"
        "class LinearFunction(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, input, weight, bias=None):\n"
        "        ctx.save_for_backward(input, weight, bias)\n"
        "        return input.mm(weight.t())\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_output):\n"
        "        input, weight, bias = ctx.saved_tensors\n"
        "        grad_input = grad_weight = grad_bias = None\n"
        "        if ctx.needs_input_grad[0]:\n"
        "            grad_input = grad_output.mm(weight)\n"
        "        if ctx.needs_input_grad[1]:\n"
        "            grad_weight = grad_output.t().mm(input)\n"
        "        if bias is not None and ctx.needs_input_grad[2]:\n"
        "            grad_bias = grad_output.sum(0)\n"
        "        return grad_input, grad_weight, grad_bias\n",
        # names that follow no scheme, positions consistent
        "import torch\n"
        "class Mul(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, a, b):\n"
        "        ctx.save_for_backward(a, b)\n"
        "        return a * b\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        a, b = ctx.saved_tensors\n"
        "        first = second = None\n"
        "        if ctx.needs_input_grad[0]:\n"
        "            first = g * b\n"
        "        if ctx.needs_input_grad[1]:\n"
        "            second = g * a\n"
        "        return first, second\n",
        # needs_input_grad unpacked into names, setup_context style
        "import torch\n"
        "class Mul(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(x, y):\n"
        "        return x * y\n"
        "    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n"
        "        ctx.save_for_backward(*inputs)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, y = ctx.saved_tensors\n"
        "        x_needs, y_needs = ctx.needs_input_grad\n"
        "        dx = g * y if x_needs else None\n"
        "        dy = None\n"
        "        if y_needs:\n"
        "            dy = g * x\n"
        "        return dx, dy\n",
        # a nested test of another flag guards its own gradient
        "import torch\n"
        "class Mul(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, a, b):\n"
        "        ctx.save_for_backward(a, b)\n"
        "        return a * b\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        a, b = ctx.saved_tensors\n"
        "        grad_a = grad_b = None\n"
        "        if ctx.needs_input_grad[0]:\n"
        "            grad_a = g * b\n"
        "            if ctx.needs_input_grad[1]:\n"
        "                grad_b = g * a\n"
        "        return grad_a, grad_b\n",
        # a variable named like an input is not read as a gradient name
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, dx):\n"
        "        return x + dx\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        dx = g\n"
        "        return dx, g\n",
        # forward rebinds its inputs (vllm's shared-kv attention: `qv` takes `q`'s value, `q` and `k` become
        # None), so a name no longer says which input a gradient belongs to
        "import torch\n"
        "class Attn(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, q, k, v, qv=None):\n"
        "        ctx.shared_kv = k is v\n"
        "        if ctx.shared_kv:\n"
        "            qv = q if qv is None else qv\n"
        "            q = k = None\n"
        "        ctx.save_for_backward(q, v, qv)\n"
        "        return v * 2\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        q, v, qv = ctx.saved_tensors\n"
        "        dqv, dv = g * 2, g * 2\n"
        "        if ctx.shared_kv:\n"
        "            return dqv, dv, None, None\n"
        "        return None, None, dv, dqv\n",
        # a straight-through estimator: the incoming gradient of the output (named for the input forward
        # returns) goes to the other input on purpose (torchdiffeq's _StitchGradient)
        "import torch\n"
        "class Stitch(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x1, out):\n"
        "        return out\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_out):\n"
        "        return grad_out, None\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class LinearFunction(torch.autograd.function.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, input, weight, location, bias=None):\n"
            "        ctx.save_for_backward(input, weight, bias, location)\n"
            "        return input.mm(weight.t()) + bias\n"
            "    @staticmethod\n"
            "    def backward(ctx, grad_output):\n"
            "        input, weight, bias, loc = ctx.saved_tensors\n"
            "        grad_input = grad_weight = grad_bias = None\n"
            "        if ctx.needs_input_grad[0]:\n"
            "            grad_input = grad_output.mm(weight)\n"
            "        if ctx.needs_input_grad[1]:\n"
            "            grad_weight = grad_output.t().mm(input)\n"
            "        if bias is not None and ctx.needs_input_grad[2]:  # HKL502\n"
            "            grad_bias = grad_output.sum(0)\n"
            "        return grad_input, grad_weight, grad_bias, grad_bias  # HKL502\n"
        ),
        Invalid(
            "import torch\n"
            "class Mul(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, a, b):\n"
            "        ctx.save_for_backward(a, b)\n"
            "        return a * b\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        a, b = ctx.saved_tensors\n"
            "        first = second = None\n"
            "        if ctx.needs_input_grad[1]:  # HKL502\n"
            "            first = g * b\n"
            "        if ctx.needs_input_grad[0]:  # HKL502\n"
            "            second = g * a\n"
            "        return first, second\n"
        ),
        Invalid(
            "import torch\n"
            "class Affine(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, weight, bias):\n"
            "        ctx.save_for_backward(x, weight)\n"
            "        return x * weight + bias\n"
            "    @staticmethod\n"
            "    def backward(ctx, grad_output):\n"
            "        x, weight = ctx.saved_tensors\n"
            "        return grad_output * weight, grad_output, grad_output * x\n"
            "class Affine2(Affine):\n"
            "    @staticmethod\n"
            "    def backward(ctx, grad_output):\n"
            "        x, weight = ctx.saved_tensors\n"
            "        dx, dweight, dbias = grad_output * weight, grad_output * x, grad_output\n"
            "        return dx, dbias, dweight  # HKL502\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for fn in autograd_functions(ctx):
            positions = self._returned_positions(ctx, fn)
            yield from self._check_guards(ctx, fn, positions)
            yield from self._check_slots(ctx, fn)

    @staticmethod
    def _returned_positions(ctx: FileContext, fn: AutogradFunction) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for ret in ctx.core.cfg(fn.backward).reachable_returns():
            if isinstance(ret.value, (ast.Tuple, ast.List)):
                for i, elt in enumerate(ret.value.elts):
                    if isinstance(elt, ast.Name):
                        out.setdefault(elt.id, set()).add(i)
        return out

    def _flag_indexes(self, fn: AutogradFunction, test: ast.AST) -> list[tuple[int, ast.AST]]:
        """``(i, node)`` for each ``ctx.needs_input_grad[i]`` (or a name unpacked
        from it) read in ``test``."""
        ctx_name = fn.ctx_name
        unpacked: dict[str, int] = {}
        for node in executed_nodes(fn.backward):
            if isinstance(node, ast.Assign) and _is_flags(node.value, ctx_name):
                for target in node.targets:
                    if isinstance(target, (ast.Tuple, ast.List)):
                        for i, elt in enumerate(target.elts):
                            if isinstance(elt, ast.Name):
                                unpacked[elt.id] = i
        out = []
        for node in executed_nodes(test):
            if isinstance(node, ast.Subscript) and _is_flags(node.value, ctx_name) \
                    and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int:
                out.append((node.slice.value, node))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in unpacked:
                out.append((unpacked[node.id], node))
        return out

    def _check_guards(self, ctx: FileContext, fn: AutogradFunction,
                      positions: dict[str, set[int]]) -> Iterable[Finding]:
        for node in executed_nodes(fn.backward):
            if isinstance(node, ast.If):
                # a name the other branch computes too (`else: grad_bias = grad_output if flags[2] else None`)
                # is not computed only under this flag
                otherwise = {target.id for stmt in node.orelse for sub in ast.walk(stmt)
                             if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and sub.value is not None
                             and not (isinstance(sub.value, ast.Constant) and sub.value.value is None)
                             for target in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
                             if isinstance(target, ast.Name)}
                guarded = [g for g in self._assigned_under(fn, node.body) if g.id not in otherwise]
            elif isinstance(node, ast.IfExp):
                parent = getattr(node, "_hl_parent", None)
                target = parent.targets[0] if isinstance(parent, ast.Assign) and len(parent.targets) == 1 else None
                guarded = [target] if isinstance(target, ast.Name) else []
            else:
                continue
            flags = self._flag_indexes(fn, node.test)
            if len({i for i, _ in flags}) != 1 or not guarded:
                continue
            index, flag_node = flags[0]
            if not 0 <= index < len(fn.inputs):
                continue
            message = self._guard_problem(fn, index, [g.id for g in guarded], positions)
            if message is not None:
                yield self.finding(
                    ctx, flag_node, message,
                    help="Test the flag of the input the gradient belongs to: `needs_input_grad[i]` for the i-th "
                         "`forward` input.",
                )

    def _assigned_under(self, fn: AutogradFunction, body: list[ast.stmt]) -> list[ast.Name]:
        """Names assigned in ``body``, except under a nested test of another
        flag (which guards them itself)."""
        out: list[ast.Name] = []
        stack: list[ast.AST] = list(reversed(body))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.If, ast.IfExp)) and self._flag_indexes(fn, node.test):
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.append(node)
            if isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
                continue
            stack.extend(reversed(list(ast.iter_child_nodes(node))))
        return out

    @staticmethod
    def _guard_problem(fn: AutogradFunction, index: int, names: list[str],
                       positions: dict[str, set[int]]) -> str | None:
        flag = f"`needs_input_grad[{index}]` is the flag of {fn.input_word(index)}"
        for name in dict.fromkeys(names):
            owner = _input_for_grad_name(name, fn.inputs)
            if owner is not None and fn.inputs.index(owner) != index:
                other = fn.inputs.index(owner)
                return (f"{flag}, but it guards `{name}`, the gradient of {fn.input_word(other)}: `{name}` is computed "
                        f"only when `{fn.inputs[index]}` requires grad, so when it does not, `{owner}` silently gets "
                        f"no gradient")
        for name in dict.fromkeys(names):
            if _input_for_grad_name(name, fn.inputs) is not None:
                continue
            where = positions.get(name)
            if where and index not in where and all(0 <= w < len(fn.inputs) for w in where):
                slot = min(where)
                return (f"{flag}, but it guards `{name}`, which `backward` returns as the gradient of "
                        f"{fn.input_word(slot)}: `{name}` is computed only when `{fn.inputs[index]}` requires grad, "
                        f"so when it does not, `{fn.inputs[slot]}` silently gets no gradient")
        return None

    def _check_slots(self, ctx: FileContext, fn: AutogradFunction) -> Iterable[Finding]:
        for ret in ctx.core.cfg(fn.backward).reachable_returns():  # a `return` that never runs returns nothing
            if not isinstance(ret.value, (ast.Tuple, ast.List)):
                continue
            wrong = []
            rebound = _inputs_rebound_away(fn)
            # backward's own parameters are the gradients of forward's OUTPUTS: `grad_out` handed on
            # unchanged is a straight-through estimator (torchdiffeq's _StitchGradient: forward(ctx, x1,
            # out) returns `out`, backward returns `grad_out, None`), whatever input it sounds like.
            incoming = {a.arg for a in fn.backward.args.posonlyargs + fn.backward.args.args}
            for slot, elt in enumerate(ret.value.elts[:len(fn.inputs)]):
                if not isinstance(elt, ast.Name) or elt.id in incoming:
                    continue
                owner = _input_for_grad_name(elt.id, fn.inputs)
                if owner is not None and fn.inputs.index(owner) != slot \
                        and owner not in rebound and fn.inputs[slot] not in rebound:
                    wrong.append(f"position {slot}, the gradient of `{fn.inputs[slot]}`, holds `{elt.id}`, named "
                                 f"for {fn.input_word(fn.inputs.index(owner))}")
            if wrong:
                yield self.finding(
                    ctx, ret,
                    f"`{fn.name}.backward` returns gradients in the wrong slots: {'; '.join(wrong)}. Autograd gives "
                    f"the i-th returned value to the i-th `forward` input, so those inputs get another input's "
                    f"gradient (or None)",
                    help="Return the gradients in the order of `forward`'s inputs, `None` for inputs that need none.",
                )


def _inputs_rebound_away(fn: AutogradFunction) -> set[str]:
    """Inputs ``forward`` rebinds to something other than a function of
    themselves (``qv = q if qv is None else qv``, ``q = k = None``): after
    that, an input's name no longer says which value, or which gradient
    slot, it stands for.  ``x = x.contiguous()`` keeps ``x`` what it was."""
    inputs = set(fn.inputs)
    away: set[str] = set()
    for node in ast.walk(fn.forward):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        read = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and name.id in inputs and \
                        (name.id not in read or (read & inputs) - {name.id}):
                    away.add(name.id)
    return away


def _is_flags(expr: ast.AST, ctx_name: str | None) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr == "needs_input_grad" and \
        isinstance(expr.value, ast.Name) and expr.value.id == ctx_name
