"""HKL201: a module backward hook reading or writing `.grad` of a parameter (hook-semantics.md, section 2)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import ClassVar, Iterable

from hooklint.findings import Applicability, Finding, Fix, Origin, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import name_uses, return_statements
from hooklint.static.context import FileContext
from hooklint.static.describe import (
    MODULE_BACKWARD_KINDS,
    MODULE_BACKWARD_TRIGGERS,
    describe_registrations,
    engine_help,
    hook_label,
    registration_notes,
    registrations_by_hook,
)
from hooklint.static.grads import parameter_grads, writes_through
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.semantic import FunctionNode
from hooklint.static.values import src

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
                help=engine_help(ctx, regs, "HKL201", replace=True) or  # under DDP/FSDP2: what works there
                "Hook the parameter instead: `param.register_hook(lambda g: ...)` changes the gradient "
                "before it is accumulated; `param.register_post_accumulate_grad_hook(fn)` (torch >= 2.1) "
                "runs after `.grad` holds this step's gradient.",
                fix=_post_accumulate_fix(ctx, func, regs, accesses),
                related=registration_notes(ctx, regs),
            )


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


def _syntax_copy(node):
    """A deep copy of the syntax alone.  ``copy.deepcopy`` also follows the
    checker's annotations (``_hl_parent``, ``_hl_scope``) up to the module and
    its semantic model, copying the whole file for each fix: 85 ms a fix on a
    500-line file, paid again on every keystroke in an editor."""
    if isinstance(node, ast.AST):
        new = type(node)()
        for name in node._fields:
            setattr(new, name, _syntax_copy(getattr(node, name, None)))
        for name in node._attributes:
            if hasattr(node, name):
                setattr(new, name, getattr(node, name))
        return new
    if isinstance(node, list):
        return [_syntax_copy(item) for item in node]
    return node


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
    outer_copy = _syntax_copy(outer)
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
