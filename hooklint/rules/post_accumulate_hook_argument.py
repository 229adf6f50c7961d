"""HKL203: a post-accumulate-grad hook that misuses its argument."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import TENSOR, inplace_writes, name_uses, return_statements
from hooklint.static.context import FileContext
from hooklint.static.describe import engine_help, hook_label, registration_notes, registrations_by_hook
from hooklint.static.hooks import HookKind
from hooklint.static.values import src

# Names that mark an in-place update of a parameter as deliberate (a learning
# rate, a decay): optimizer-in-backward code, not a gradient edit.
_UPDATE_WORDS = ("lr", "learning_rate", "weight_decay", "decay", "momentum", "step_size")


# In-place clamps of a parameter are weight clipping, an established parameter
# update; they are ambiguous without `.grad`, so they are not reported.
_PARAMETER_OPS = frozenset({"clamp_", "clip_", "clamp_min_", "clamp_max_", "copy_", "set_"})


_NONE_CALLS = frozenset({"__setitem__", "append", "extend", "update", "put", "write", "step", "zero_grad",
                         "register_hook", "record_stream"})


_TORCH_TENSOR_FACTORIES = frozenset({"zeros_like", "ones_like", "full_like", "clamp", "clip", "where", "mul", "add",
                                     "sub", "div", "neg", "abs", "sign", "nan_to_num"})


def _mentions_update(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        name = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
        if name is not None and any(word == name.lower() or name.lower().endswith("_" + word)
                                    or name.lower().startswith(word + "_") for word in _UPDATE_WORDS):
            return True
    return False


def _return_error(ctx: FileContext, expr: ast.expr, param: str | None) -> str | None:
    """The error torch raises when a post-accumulate-grad hook returns ``expr``,
    if that is evident: a non-tensor raises TypeError, a tensor other than the
    parameter itself raises RuntimeError (the parameter itself is accepted, so
    `lambda p: p.add_(p.grad, alpha=-lr)` is fine)."""
    if isinstance(expr, ast.Constant):
        if expr.value is None:
            return None
        return f"TypeError: expected Variable, but hook returned '{type(expr.value).__name__}'"
    literal = {ast.Tuple: "tuple", ast.List: "list", ast.Dict: "dict", ast.Set: "set", ast.ListComp: "list",
               ast.DictComp: "dict", ast.SetComp: "set", ast.JoinedStr: "str"}.get(type(expr))
    if literal is not None:
        return f"TypeError: expected Variable, but hook returned '{literal}'"
    if _is_parameter_itself(expr, param):
        return None
    tensor_error = "RuntimeError: Tensor post accumulate grad hooks should return None."
    operands = [expr.left, expr.right] if isinstance(expr, ast.BinOp) else \
        [expr.operand] if isinstance(expr, ast.UnaryOp) else []
    if any(_rooted_at(operand, param) for operand in operands):
        return tensor_error
    if isinstance(expr, ast.Attribute):
        return tensor_error if _rooted_at(expr, param) else None
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and _rooted_at(func.value, param) and not func.attr.startswith("_") \
                and func.attr not in _NONE_CALLS:
            return tensor_error  # a tensor method of the parameter's gradient, `.data`, a copy...
        qual = ctx.model.qualify(func)
        if qual and qual.startswith("torch.") and qual.rsplit(".", 1)[-1] in _TORCH_TENSOR_FACTORIES:
            return tensor_error
    return None


def _is_parameter_itself(expr: ast.AST, param: str | None) -> bool:
    """``p``, or an in-place method chain on ``p`` (which returns ``p``)."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
            and expr.func.attr.endswith("_") and not expr.func.attr.startswith("_"):
        expr = expr.func.value
    return isinstance(expr, ast.Name) and expr.id == param


def _rooted_at(expr: ast.AST, name: str | None) -> bool:
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return isinstance(expr, ast.Name) and expr.id == name


class PostAccumulateHookArgument(Rule):
    """
    ## What it does
    Reports a `register_post_accumulate_grad_hook` callback that treats its
    argument as the gradient: it modifies the argument in place
    (`p.mul_(0.5)`, `p[idx] = 0`) or all-reduces it (`dist.all_reduce(p)`)
    without ever touching `p.grad`, or it returns a value other than None or
    the parameter itself.

    ## Why is this bad?
    A post-accumulate-grad hook is called with the *parameter*, after its
    `.grad` has been accumulated; the gradient is `p.grad`.  `p.mul_(0.5)` there
    halves the weights and leaves the gradient as it was; `dist.all_reduce(p)`
    sums the weights across ranks.  Unlike tensor hooks, a post-accumulate-grad
    hook cannot return a replacement: for a returned tensor PyTorch raises
    `RuntimeError: Tensor post accumulate grad hooks should return None.`
    during backward, which also catches `lambda p: p.grad.mul_(0.5)` (the
    in-place method returns the gradient); for a tuple or a number it raises
    `TypeError: expected Variable, but hook returned 'tuple'`.  Returning the
    parameter itself is accepted (`lambda p: p.add_(p.grad, alpha=-lr)`).

    ## Known problems
    Updating the parameter is what optimizer-in-backward hooks do on purpose.
    A hook that reads `p.grad`, or whose in-place update mentions a learning
    rate or decay (`p.mul_(1 - lr * wd)`), is not reported; nor is an in-place
    clamp of the parameter, which is taken for weight clipping.  At run time
    a hook whose argument is named as a gradient (`grad`, `g`, `gradient`) is
    reported whatever its code mentions (`def clip(grad): grad.clamp_(-1, 1)`
    clips the weights), and so is an edit through `.data` in a hook that never
    uses `.grad`.

    ## Example
    ```python
    import torch.nn as nn

    def halve_grad(p):
        p.mul_(0.5)

    layer = nn.Linear(4, 2)
    layer.weight.register_post_accumulate_grad_hook(halve_grad)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def halve_grad(p):
        p.grad.mul_(0.5)

    layer = nn.Linear(4, 2)
    layer.weight.register_post_accumulate_grad_hook(halve_grad)
    ```

    ## Fix safety
    There is no automatic fix: whether the parameter or its gradient was meant
    is the author's call.

    ## References
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    - [How to save memory by fusing the optimizer step into the backward pass](https://pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html)
    """

    code = "HKL203"
    origins = (Origin.STATIC, Origin.RUNTIME)
    name = "post-accumulate-hook-argument"
    summary = "A post-accumulate-grad hook edits or returns its argument, the parameter, as if it were the gradient"
    severity = Severity.ERROR
    triggers = ("register_post_accumulate_grad_hook",)
    VALID: ClassVar[tuple[str, ...]] = (
        # editing the gradient
        "import torch.nn as nn\n"
        "layer = nn.Linear(4, 2)\n"
        "layer.weight.register_post_accumulate_grad_hook(lambda p: p.grad.__setitem__(0, 0.0))\n",
        # optimizer in backward: a parameter update that reads the gradient
        "import torch\n"
        "import torch.nn as nn\n"
        "model = nn.Linear(4, 2)\n"
        "def sgd_step(p, lr=0.1):\n"
        "    with torch.no_grad():\n"
        "        p.add_(p.grad, alpha=-lr)\n"
        "    p.grad = None\n"
        "for p in model.parameters():\n"
        "    p.register_post_accumulate_grad_hook(sgd_step)\n",
        # the PyTorch docs' SGD example: add_ returns the parameter itself, which torch accepts
        "import torch\n"
        "v = torch.tensor([0., 0., 0.], requires_grad=True)\n"
        "lr = 0.01\n"
        "v.register_post_accumulate_grad_hook(lambda p: p.add_(p.grad, alpha=-lr))\n",
        # optimizer in backward through a per-parameter optimizer
        "import torch\n"
        "import torch.nn as nn\n"
        "model = nn.Linear(4, 2)\n"
        "opts = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}\n"
        "def step(p):\n"
        "    opts[p].step()\n"
        "    opts[p].zero_grad()\n"
        "for p in model.parameters():\n"
        "    p.register_post_accumulate_grad_hook(step)\n",
        # decoupled weight decay: a deliberate parameter update
        "import torch.nn as nn\n"
        "lr, weight_decay = 0.1, 0.01\n"
        "layer = nn.Linear(4, 2)\n"
        "def decay(p):\n"
        "    p.data.mul_(1 - lr * weight_decay)\n"
        "layer.weight.register_post_accumulate_grad_hook(decay)\n",
        # a tensor hook's argument is the gradient: not this rule
        "import torch\n"
        "x = torch.ones(3, requires_grad=True)\n"
        "x.register_hook(lambda g: g * 2)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def halve_grad(p):\n"
            "    p.mul_(0.5)  # HKL203\n"
            "layer = nn.Linear(4, 2)\n"
            "layer.weight.register_post_accumulate_grad_hook(halve_grad)\n"
        ),
        Invalid(
            "import torch.distributed as dist\n"
            "import torch.nn as nn\n"
            "model = nn.Linear(4, 2)\n"
            "def sync(param):\n"
            "    dist.all_reduce(param)  # HKL203\n"
            "for param in model.parameters():\n"
            "    param.register_post_accumulate_grad_hook(sync)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "layer = nn.Linear(4, 2)\n"
            "layer.weight.register_post_accumulate_grad_hook(lambda p: p.grad * 0.5)  # HKL203\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for func, regs in registrations_by_hook(ctx, (HookKind.POST_ACCUMULATE,)).items():
            reg = regs[0]
            hook_name = hook_label(reg)
            param = reg.param("param")
            where = f"`{hook_name}` (post-accumulate-grad hook on {reg.describe_target()})"
            notes = registration_notes(ctx, regs)
            reported = False
            if param is not None and not self._reads_grad(func, param):
                for write in inplace_writes(func, {param: TENSOR}, ctx.model.qualify):
                    if self._deliberate_update(write):
                        continue
                    text = ctx.segment(write.node).splitlines()[0] if ctx.segment(write.node) else write.how
                    if write.how.startswith("collective"):
                        effect = (f"`{text}` combines the parameter's values across ranks, not its gradient "
                                  f"(`{param}.grad` stays local)")
                    else:
                        effect = f"`{text}` changes the parameter's values (the weights); `{param}.grad` is unchanged"
                    yield self.finding(
                        ctx, write.node,
                        f"{where} receives the parameter `{param}`, not its gradient: {effect}",
                        help=f"The gradient is `{param}.grad`: edit that (`{param}.grad.mul_(...)`), "
                        f"or all-reduce `{param}.grad`." + engine_help(ctx, regs, "HKL203"),
                        related=notes,
                    )
                    reported = True
                    break
            if reported:
                continue
            returned = self._bad_return(ctx, func, param)
            if returned is not None:
                node, error = returned
                yield self.finding(
                    ctx, node,
                    f"{where} returns `{src(node)}`: a post-accumulate-grad hook cannot replace anything and "
                    f"must return None; torch raises `{error}` during backward",
                    help=f"Edit `{param or 'param'}.grad` in place and return nothing (in a lambda, "
                    "`p.grad.__setitem__(idx, 0.0)` returns None; or use a `def`)." + engine_help(ctx, regs, "HKL203"),
                    related=notes,
                )

    @staticmethod
    def _reads_grad(func: ast.AST, param: str) -> bool:
        return any(isinstance(getattr(use, "_hl_parent", None), ast.Attribute) and use._hl_parent.attr == "grad"
                   for use in name_uses(func, param))

    @staticmethod
    def _deliberate_update(write) -> bool:
        node = write.node
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _PARAMETER_OPS:
            return True
        return _mentions_update(node)

    @staticmethod
    def _bad_return(ctx: FileContext, func: ast.AST, param: str | None) -> tuple[ast.expr, str] | None:
        values = [func.body] if isinstance(func, ast.Lambda) else [
            r.value for r in return_statements(func) if r.value is not None]
        for value in values:
            error = _return_error(ctx, value, param)
            if error is not None:
                return value, error
        return None
