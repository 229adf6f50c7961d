"""HKL2xx: hooks that edit parameter gradients at the wrong time or in the wrong
place (hook-semantics.md, section 2).

A module backward hook runs when the gradient w.r.t. the module's inputs (or
outputs) is computed, not after the module's parameters' ``.grad`` were
written; a post-accumulate-grad hook runs after, but receives the parameter,
not its gradient.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from typing import ClassVar, Iterable

from hooklint.findings import Applicability, Finding, Fix, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import (
    TENSOR,
    body_nodes,
    inplace_writes,
    name_uses,
    return_statements,
)
from hooklint.static.context import FileContext
from hooklint.static.grads import is_parameter, parameter_grads, writes_through
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.semantic import FunctionNode
from hooklint.static.values import src

MODULE_BACKWARD_KINDS = (HookKind.BACKWARD_LEGACY, HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE)
# Every module backward registration API contains one of these
# (register_[full_]backward_hook, register_full_backward_pre_hook and the
# register_module_* globals).
MODULE_BACKWARD_TRIGGERS = ("backward_hook", "backward_pre_hook")

KIND_WORDS = {
    HookKind.BACKWARD_LEGACY: "legacy backward hook",
    HookKind.FULL_BACKWARD: "full backward hook",
    HookKind.FULL_BACKWARD_PRE: "full backward pre-hook",
    HookKind.TENSOR: "tensor hook",
    HookKind.POST_ACCUMULATE: "post-accumulate-grad hook",
    HookKind.FORWARD: "forward hook",
    HookKind.FORWARD_PRE: "forward pre-hook",
}

# When each kind of module backward hook runs, relative to AccumulateGrad
# (tests/behaviour/test_grad_edit.py observes each sentence).
_WHEN = {
    HookKind.FULL_BACKWARD: (
        "a full backward hook can run before this step's gradient is accumulated: when no input of the "
        "module requires grad (a first layer fed plain data) `.grad` is None on the first step and last "
        "step's afterwards, and the edit is lost"
    ),
    HookKind.BACKWARD_LEGACY: (
        "a legacy backward hook runs right after the module's last autograd op, before its parameters' "
        "gradients are accumulated: `.grad` is None on the first step and last step's afterwards, and the "
        "edit is lost"
    ),
    HookKind.FULL_BACKWARD_PRE: (
        "a full backward pre-hook runs before the module's own backward: `.grad` is None on the first step "
        "and last step's afterwards, and the edit is lost"
    ),
}

def registrations_by_hook(ctx: FileContext, kinds: tuple[HookKind, ...]) -> dict[ast.AST, list[Registration]]:
    """Registrations of the given kinds, grouped by the hook function they run
    (with hooks that reach a registration through a helper's parameters)."""
    out: dict[ast.AST, list[Registration]] = {}
    for reg in ctx.hooks.instances_by_kind(*kinds):
        if reg.hook is not None:
            out.setdefault(reg.hook.node, []).append(reg)
    return out


def hook_label(reg: Registration) -> str:
    """``grad_mod``, ``Net._clip`` for a method, ``GradSync.__call__`` for a callable object."""
    hook = reg.hook
    if hook is None:
        return "the hook"
    if hook.owner is not None and hook.via in ("method", "__call__"):
        return f"{hook.owner.name}.{hook.name}"
    return hook.name


def describe_registrations(regs: list[Registration]) -> str:
    """Where a hook is registered: ``full backward hook on `net.fc3` (Linear) at line 56, and on ...``."""
    parts = []
    previous_kind = None
    for reg in regs[:3]:
        kind = "" if reg.kind is previous_kind else f"{KIND_WORDS[reg.kind]} "
        target = "every module (global hook)" if reg.is_global else reg.describe_target()
        parts.append(f"{kind}on {target} at line {reg.call.lineno}")
        previous_kind = reg.kind
    if len(regs) > 3:
        parts.append(f"{len(regs) - 3} more")
    return ", and ".join(parts) if len(parts) == 2 else ", ".join(parts)


def registration_notes(ctx: FileContext, regs: list[Registration]) -> list[Related]:
    return [Related(f"registered as a {KIND_WORDS[r.kind]} on {r.describe_target()}", ctx.display_path,
                    ctx.span(r.call)[0]) for r in regs]


class GradEditInModuleHook(Rule):
    """
    ## What it does
    Reports a module backward hook (`register_full_backward_hook`,
    `register_backward_hook`, `register_full_backward_pre_hook`, their global
    `register_module_*` forms, and the same registrations made for every layer
    through `module.apply(fn)`) whose body reads or writes a parameter's
    `.grad`: `module.weight.grad`, `self.fc.weight.grad` in a bound-method hook,
    `p.grad` for `p in module.parameters()`.

    ## Why is this bad?
    A full backward hook runs when the gradient with respect to the module's
    *inputs* is computed, which is not when the module's parameters receive
    their gradients.  If no input requires grad (the first layer of a network
    fed plain data, a frozen embedding in front), it runs before
    `AccumulateGrad` writes `.grad`: on the first step `.grad` is None and the
    hook raises `AttributeError`; on later steps it sees, and edits, the
    *previous* step's gradient, and this step's gradient is then accumulated on
    top, so the edit is lost.  A legacy hook runs after the module's last op (on
    `nn.Linear`, before the weight gradient is accumulated even when the input
    requires grad), and a backward pre-hook always runs before the module's
    backward.  Even where the input requires grad and it happens to work, the
    order between the hook and `AccumulateGrad` is an engine scheduling detail.

    The hook to edit a parameter's gradient is on the parameter itself.

    ## Known problems
    The static rule cannot see where the module sits in the network or whether
    its inputs require grad; it reports the pattern wherever it appears.

    ## Example
    ```python
    import torch.nn as nn

    def freeze_single(index):
        def callback(module, grad_input, grad_output):
            module.weight.grad.data[index] = 0
        return callback

    conv = nn.Conv2d(3, 1, 3)
    conv.register_full_backward_hook(freeze_single((0, 1, 2, 1)))
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def freeze_single(index):
        def callback(param):
            param.grad[index] = 0
        return callback

    conv = nn.Conv2d(3, 1, 3)
    conv.weight.register_post_accumulate_grad_hook(freeze_single((0, 1, 2, 1)))  # torch >= 2.1
    # or, before accumulation:
    # mask = torch.ones_like(conv.weight); mask[0, 1, 2, 1] = 0
    # conv.weight.register_hook(lambda g: g * mask)
    ```

    ## Fix safety
    The fix is **display-only**: where the hook's edit touches a single
    parameter attribute of the hooked module, the message shows the same edit
    as a post-accumulate-grad hook on that parameter, with its registration.
    The hook's `(module, grad_input, grad_output)` parameters become one
    `param`; its other parameters stay with their defaults (a `mask=mask`
    default is what keeps each hook defined in a loop on its own layer's
    mask), and so do those that `functools.partial` or a bound method
    supply.  Pasted in place of the hook and its registration (in the same
    loop), the code runs and edits each parameter's accumulated gradient.
    It changes the hook's signature and registration, so it is never applied.

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    """

    code = "HKL201"
    origins = (Origin.STATIC, Origin.GRAPH, Origin.RUNTIME)
    name = "grad-edit-in-module-hook"
    summary = "A module backward hook reads or writes a parameter's `.grad`, which may not hold this step's gradient"
    severity = Severity.ERROR
    triggers = MODULE_BACKWARD_TRIGGERS
    fix_applicability = "display-only: shows the equivalent post-accumulate-grad hook where it can be derived"
    VALID: ClassVar[tuple[str, ...]] = (
        # the parameter's own hooks
        "import torch.nn as nn\n"
        "conv = nn.Conv2d(3, 1, 3)\n"
        "def zero(param):\n"
        "    param.grad[0, 1, 2, 1] = 0.0\n"
        "conv.weight.register_post_accumulate_grad_hook(zero)\n"
        "conv.bias.register_hook(lambda g: g * 0.5)\n",
        # `.grad` read in a forward hook: it runs before backward, not during it
        "import torch.nn as nn\n"
        "norms = []\n"
        "def log(module, inp, out):\n"
        "    if module.weight.grad is not None:\n"
        "        norms.append(module.weight.grad.norm())\n"
        "nn.Linear(2, 2).register_forward_hook(log)\n",
        # a backward hook that only uses its own arguments
        "import torch.nn as nn\n"
        "def scale(module, grad_input, grad_output):\n"
        "    return (grad_input[0] * 0.5,)\n"
        "nn.Linear(2, 2).register_full_backward_hook(scale)\n",
        # a class's own method named like the torch API is not torch's
        "class Recorder:\n"
        "    def register_full_backward_hook(self, fn):\n"
        "        self.fn = fn\n"
        "def hook(module, gi, go):\n"
        "    print(module.weight.grad)\n"
        "Recorder().register_full_backward_hook(hook)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def freeze_single(index):\n"
            "    def callback(module, grad_input, grad_output):\n"
            "        module.weight.grad.data[index] = 0  # HKL201\n"
            "    return callback\n"
            "conv = nn.Conv2d(3, 1, 3)\n"
            "conv.register_full_backward_hook(freeze_single((0, 1, 2, 1)))\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.fc = nn.Linear(2, 2)\n"
            "        self.fc.register_full_backward_hook(self._clip)\n"
            "    def _clip(self, module, grad_input, grad_output):\n"
            "        self.fc.weight.grad.clamp_(-1, 1)  # HKL201\n"
            "    def forward(self, x):\n"
            "        return self.fc(x)\n"
        ),
        Invalid(
            "import torch\n"
            "def log_norms(module, grad_output):\n"
            "    for p in module.parameters():\n"
            "        print(p.grad.norm())  # HKL201\n"
            "torch.nn.modules.module.register_module_full_backward_pre_hook(log_norms)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for func, regs in registrations_by_hook(ctx, MODULE_BACKWARD_KINDS).items():
            accesses = parameter_grads(ctx, func)
            if not accesses:
                continue
            first = accesses[0]
            hook_name = hook_label(regs[0])
            verb = "writes to" if any(writes_through(a) for a in accesses) else "reads"
            when = "; ".join(dict.fromkeys(_WHEN[r.kind] for r in regs))
            message = (f"`{hook_name}` ({describe_registrations(regs)}) {verb} `{src(first)}`, "
                       f"but {when}")
            fed = _fed_by_data(ctx, regs)
            if fed:
                message += (f"; the model graph shows {', '.join(fed)} is fed straight from data, so there "
                            f"it does run too early")
            yield self.finding(
                ctx, first, message,
                origin=Origin.GRAPH if fed else Origin.STATIC,
                help=_engine_help(ctx, regs, "HKL201", replace=True) or  # under DDP/FSDP2: what works there
                "Hook the parameter instead: `param.register_hook(lambda g: ...)` changes the gradient "
                "before it is accumulated; `param.register_post_accumulate_grad_hook(fn)` (torch >= 2.1) "
                "runs after `.grad` holds this step's gradient.",
                fix=_post_accumulate_fix(ctx, func, regs, accesses),
                related=registration_notes(ctx, regs),
            )


def _engine_help(ctx: FileContext, regs: list[Registration], code: str, replace: bool = False) -> str:
    """The fix that works under the engine the file shows wrapping the hooked modules
    (FSDP2 before DDP: its advice differs most); "" when it shows none.  For HKL201 it
    replaces the help (``replace``), for HKL203 it is a sentence to add."""
    from hooklint.static.distributed import ENGINE_HELP, engines_of_registrations

    engines = engines_of_registrations(ctx, regs)
    if not engines:
        return ""
    text = ENGINE_HELP[code]["fsdp2" if "fsdp2" in engines else "ddp"]
    return text


def _fed_by_data(ctx: FileContext, regs: list[Registration]) -> list[str]:
    """Hooked modules that the graph layer saw fed by data needing no grad
    (hook-semantics.md section 2): where the hook certainly runs too early."""
    if ctx.graph is None:
        return []
    from hooklint.graph.link import describe_module, fed_by_data

    names: dict[str, None] = {}
    for reg in regs:
        for model, module in fed_by_data(ctx, reg.receiver):
            names[describe_module(model, module)] = None
    return list(names)


# --------------------------------------------------------------- display fix

@dataclass
class _Derivation:
    module_param: str
    attr: str


def _derive(ctx: FileContext, func: ast.AST, regs: list[Registration],
            accesses: list[ast.Attribute]) -> _Derivation | None:
    """The hook can be rewritten as a post-accumulate hook when every use of its
    module argument is ``module.<attr>`` for one parameter attribute, it uses
    no other argument, and it returns nothing."""
    if not isinstance(func, FunctionNode):
        return None
    reg = regs[0]
    module_param = reg.param("module")
    if module_param is None or any(r.param("module") != module_param for r in regs):
        return None
    attrs = set()
    for access in accesses:
        base = access.value
        if not (isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name)
                and base.value.id == module_param):
            return None
        attrs.add(base.attr)
    if len(attrs) != 1:
        return None
    attr = attrs.pop()
    for use in name_uses(func, module_param):
        parent = getattr(use, "_hl_parent", None)
        if not (isinstance(parent, ast.Attribute) and parent.attr == attr):
            return None
    for role in ("grad_input", "grad_output"):
        name = reg.param(role)
        if name is not None and name_uses(func, name):
            return None
    for ret in return_statements(func):
        if ret.value is not None and not (isinstance(ret.value, ast.Constant) and ret.value.value is None):
            return None
    return _Derivation(module_param, attr)


class _ToPostAccumulate(ast.NodeTransformer):
    def __init__(self, module_param: str, attr: str, new_param: str):
        self.module_param = module_param
        self.attr = attr
        self.new_param = new_param

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if node.attr == self.attr and isinstance(node.value, ast.Name) and node.value.id == self.module_param:
            return ast.copy_location(ast.Name(self.new_param, ast.Load()), node)
        # `param.grad.data[...]`: the hook runs outside autograd, `.data` adds nothing
        if node.attr == "data" and isinstance(node.value, ast.Attribute) and node.value.attr == "grad":
            return node.value
        return node


def _post_accumulate_arguments(args: ast.arguments, reg: Registration, new_param: str) -> ast.arguments | None:
    """The hook's parameters with the module hook's (module, grad_input,
    grad_output) replaced by the parameter: those the registration binds
    (`self`, functools.partial's) and the others stay, defaults included.
    A `mask=mask` default is how a hook defined in a loop keeps that
    iteration's value: dropping it makes every hook use the last one."""
    hook = reg.hook
    if hook is None:
        return None
    roles = {name for name in (reg.param(r) for r in ("module", "grad_input", "grad_output")) if name}
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    default_of = {id(a): args.defaults[i - first_default] for i, a in enumerate(positional) if i >= first_default}
    kept = positional[:hook.bound]
    rest = [a for a in positional[hook.bound:] if a.arg not in roles]
    if any(id(a) in default_of for a in kept):
        return None  # the new parameter cannot follow a parameter with a default
    new_args = kept + [ast.arg(new_param)] + rest
    defaults = [default_of[id(a)] for a in rest if id(a) in default_of]
    if any(id(a) not in default_of for a in rest[len(rest) - len(defaults):]) or \
            any(id(a) in default_of for a in rest[:len(rest) - len(defaults)]):
        return None
    return ast.arguments(posonlyargs=[], args=new_args, vararg=args.vararg, kwonlyargs=args.kwonlyargs,
                         kw_defaults=args.kw_defaults, kwarg=args.kwarg, defaults=defaults)


def _post_accumulate_fix(ctx: FileContext, func: ast.AST, regs: list[Registration],
                         accesses: list[ast.Attribute]) -> Fix | None:
    derivation = _derive(ctx, func, regs, accesses)
    if derivation is None:
        return None
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
    new_param = next(n for n in ("param", "p", "parameter", "param_") if n not in used)
    # Show the whole factory when the hook is made by one (seed 003's freeze_single).
    outer = func
    if any(r.hook is not None and r.hook.via == "factory" for r in regs):
        parent = getattr(func, "_hl_parent", None)
        if isinstance(parent, FunctionNode):
            outer = parent
    outer_copy = copy.deepcopy(outer)
    target = outer_copy if outer is func else next(
        n for n in ast.walk(outer_copy) if isinstance(n, FunctionNode)
        and (n.lineno, n.col_offset) == (func.lineno, func.col_offset))  # type: ignore[attr-defined]
    arguments = _post_accumulate_arguments(target.args, regs[0], new_param)
    if arguments is None:
        return None
    target.args = arguments
    transformer = _ToPostAccumulate(derivation.module_param, derivation.attr, new_param)
    target.body = [transformer.visit(stmt) for stmt in target.body]
    target.decorator_list = []
    try:
        code = [ast.unparse(ast.fix_missing_locations(outer_copy))]
    except Exception:  # noqa: BLE001 - a display aid must never break the check
        return None
    for reg in regs:
        hook_text = ctx.segment(reg.hook_expr) if reg.hook_expr is not None else derivation.attr
        module = reg.receiver_module
        if module is not None and module.applied_from is not None:
            code.append(f"for m in {src(module.applied_from)}.modules():\n"
                        f"    if isinstance(getattr(m, {derivation.attr!r}, None), torch.nn.Parameter):\n"
                        f"        m.{derivation.attr}.register_post_accumulate_grad_hook({hook_text})")
        elif reg.receiver is not None:
            code.append(f"{ctx.segment(reg.receiver)}.{derivation.attr}"
                        f".register_post_accumulate_grad_hook({hook_text})")
        else:
            code.append(f"# for each module the global hook covered:\n"
                        f"# module.{derivation.attr}.register_post_accumulate_grad_hook({hook_text})")
    # ast.unparse puts a blank line before a nested def; the message is denser without
    text = "\n".join(line for line in "\n".join(dict.fromkeys(code)).splitlines() if line.strip())
    return Fix(
        message="Edit the gradient after it is accumulated, with a post-accumulate-grad hook on the parameter "
        "(torch >= 2.1):\n" + text,
        edits=(),
        applicability=Applicability.DISPLAY_ONLY,
    )


# ---------------------------------------------------------------- HKL202

def _none_test(ctx: FileContext, test: ast.expr) -> tuple[str, ast.Attribute] | None:
    """("is", grad) for ``<param>.grad is None``, ("is not", grad) for ``is not None``,
    also as one operand of ``or`` / ``and`` respectively."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value is None and isinstance(test.left, ast.Attribute) \
            and test.left.attr == "grad" and is_parameter(ctx, test.left.value):
        if isinstance(test.ops[0], ast.Is):
            return "is", test.left
        if isinstance(test.ops[0], ast.IsNot):
            return "is not", test.left
        return None
    if isinstance(test, ast.BoolOp):
        wanted = "is" if isinstance(test.op, ast.Or) else "is not"
        for value in test.values:
            found = _none_test(ctx, value)
            if found is not None and found[0] == wanted:
                return found
    return None


def _only_exits(body: list[ast.stmt]) -> bool:
    return all(isinstance(s, (ast.Return, ast.Continue, ast.Pass)) or
               (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in body) \
        and any(isinstance(s, (ast.Return, ast.Continue)) for s in body)


class GradNoneGuard(Rule):
    """
    ## What it does
    Reports a module backward hook that returns (or skips a parameter) when a
    parameter's `.grad is None`, or that acts only under
    `if p.grad is not None:`.

    ## Why is this bad?
    The guard looks like a "safety measure for the last layer", but in a module
    backward hook `.grad` is None exactly when the hook runs before the
    parameter's gradient is accumulated: on every layer whose inputs need no
    grad (the first layer fed plain data), on the first step, and at *every*
    step when `optimizer.zero_grad()` resets gradients to None (its default).
    There the hook silently does nothing, forever; where gradients are kept
    instead, it edits the previous step's gradient (see HKL201).

    ## Example
    ```python
    import torch.nn as nn

    def grad_mod(module, grad_inputs, grad_outputs):
        if module.weight.grad is None:  # safety measure for last layer
            return None
        module.weight.grad.clamp_(-1, 1)

    nn.Linear(1, 2).register_full_backward_hook(grad_mod)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def grad_mod(param):
        param.grad.clamp_(-1, 1)  # .grad is set when this runs

    nn.Linear(1, 2).weight.register_post_accumulate_grad_hook(grad_mod)
    ```

    ## Fix safety
    There is no automatic fix: the edit must move to a hook on the parameter
    (HKL201 shows the equivalent post-accumulate-grad hook where it can).

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - [`Optimizer.zero_grad(set_to_none=True)`](https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html)
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    """

    code = "HKL202"
    name = "grad-none-guard"
    summary = "A module backward hook skips its work when `.grad is None`, which makes it a silent no-op"
    severity = Severity.ERROR
    triggers = MODULE_BACKWARD_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # post-accumulate hooks run after `.grad` is set; a guard there is harmless
        "import torch.nn as nn\n"
        "def clip(param):\n"
        "    if param.grad is None:\n"
        "        return\n"
        "    param.grad.clamp_(-1, 1)\n"
        "nn.Linear(2, 2).weight.register_post_accumulate_grad_hook(clip)\n",
        # a guard on the hook's own argument, not on a parameter's .grad
        "import torch.nn as nn\n"
        "def scale(module, grad_input, grad_output):\n"
        "    if grad_input[0] is None:\n"
        "        return None\n"
        "    return (grad_input[0] * 2,)\n"
        "nn.Linear(2, 2).register_full_backward_hook(scale)\n",
        # the guard in an ordinary training step
        "def clip_all(model):\n"
        "    for p in model.parameters():\n"
        "        if p.grad is not None:\n"
        "            p.grad.clamp_(-1, 1)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def grad_mod(module, grad_inputs, grad_outputs):\n"
            "    if module.weight.grad is None:  # HKL201, HKL202\n"
            "        return None\n"
            "    module.weight.grad.clamp_(-1, 1)\n"
            "nn.Linear(1, 2).register_full_backward_hook(grad_mod)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def clip(module, grad_input, grad_output):\n"
            "    for p in module.parameters():\n"
            "        if p.grad is not None:  # HKL201, HKL202\n"
            "            p.grad.clamp_(-1, 1)\n"
            "def attach(m):\n"
            "    m.register_full_backward_hook(clip)\n"
            "net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
            "net.apply(attach)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for func, regs in registrations_by_hook(ctx, MODULE_BACKWARD_KINDS).items():
            hook_name = hook_label(regs[0])
            for node in body_nodes(func):
                if not isinstance(node, ast.If):
                    continue
                found = _none_test(ctx, node.test)
                if found is None:
                    continue
                op, grad = found
                if op == "is" and _only_exits(node.body):
                    exits = "returns" if any(isinstance(s, ast.Return) for s in node.body) else "skips"
                    what = f"{exits} when `{src(grad)} is None`"
                elif op == "is not" and not node.orelse:
                    what = f"acts only under `if {src(grad)} is not None`"
                else:
                    continue
                start = ctx.span(node)[0]
                end = ctx.span(node.test)[1]
                yield self.make(
                    path=ctx.display_path, location=start, end_location=end,
                    message=f"`{hook_name}` ({describe_registrations(regs)}) {what}; `.grad` is None there "
                    f"whenever the hook runs before the gradient is accumulated (on any layer whose inputs "
                    f"need no grad, at every step when zero_grad() resets grads to None, its default), so "
                    f"the hook silently does nothing there",
                    help="Move the edit to a hook on the parameter: "
                    "`param.register_post_accumulate_grad_hook(fn)` runs when `.grad` is set.",
                    related=registration_notes(ctx, regs),
                )


# ---------------------------------------------------------------- HKL203

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
                        f"or all-reduce `{param}.grad`." + _engine_help(ctx, regs, "HKL203"),
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
                    "`p.grad.__setitem__(idx, 0.0)` returns None; or use a `def`)." + _engine_help(ctx, regs, "HKL203"),
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
