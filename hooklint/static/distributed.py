"""What one file shows of DDP and FSDP2: which modules it wraps, and whether a
hook's module or parameter is one of them.  Shared by HKL602, HKL603 and the
engine-aware help of HKL201/HKL203.

A module expression is reduced to a *path*: a root and the attribute and index
steps from it (``model.layers[0].fc`` is root ``model``, steps ``layers``,
``0``, ``fc``).  Loops add wildcards: ``for layer in model.layers`` makes
``layer`` the path ``model.layers.*``; ``for p in model.parameters()`` makes
``p`` a parameter somewhere under ``model`` (``model.**``).  Roots are names of
one scope (``model`` in the function that defines it), or, for ``self`` in the
methods of a class and for names whose value is an instance of that class, the
class itself.  ``model = DDP(model)`` and ``model = fully_shard(model)`` keep
the root; ``ddp.module`` is the wrapped module.

A wrap covers a hook's target when the wrap's path is a prefix of the target's
(wildcards matching).  Anything not resolved this way is unknown, and unknown
never covers: the rules stay quiet.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property

from hooklint.static.semantic import SemanticModel, short_source
from hooklint.static.values import Inference, ModuleValue

DDP_NAMES = frozenset({
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
})
FSDP2_NAMES = frozenset({
    "torch.distributed.fsdp.fully_shard",
    "torch.distributed.fsdp._fully_shard.fully_shard",
    "torch.distributed.fsdp._fully_shard._fully_shard.fully_shard",
    "torch.distributed._composable.fsdp.fully_shard",
    "torch.distributed._composable.fsdp.fully_shard.fully_shard",
})
# Trigger words: a file without one of these shows no wrap.
DDP_TRIGGERS = ("DistributedDataParallel", "DDP")
FSDP2_TRIGGERS = ("fully_shard",)

# The fix that works under each engine, for the rules whose usual advice does not (HKL201's
# parameter tensor hook never runs under FSDP2); the static rules and the run-time layer
# both give it.
ENGINE_HELP = {
    "HKL201": {
        "fsdp2": "Under FSDP2 a parameter tensor hook never runs (HKL603): register "
                 "`param.register_post_accumulate_grad_hook(fn)` on the sharded parameter, after `fully_shard`; it "
                 "runs once `param.grad` holds this rank's shard of the reduced gradient (a DTensor: multiply it by "
                 "a mask distributed the same way, `distribute_tensor(mask, param.grad.device_mesh, "
                 "param.grad.placements)`, or edit `param.grad.to_local()`).",
        "ddp": "Edit the gradient from a hook on the parameter itself, which DDP keeps: "
               "`param.register_hook(lambda g: ...)` runs before accumulation and may return a new gradient; "
               "`param.register_post_accumulate_grad_hook(fn)` runs once `param.grad` holds this backward's local "
               "gradient. Both run before DDP's all-reduce, so the edit is part of what is averaged; a module hook's "
               "edit of `.grad` is overwritten by it (HKL602).",
    },
    "HKL203": {
        "fsdp2": " Under FSDP2, `param.grad` is this rank's shard of the gradient, already reduce-scattered (a "
                 "DTensor).",
        "ddp": " Under DDP the hook runs before the all-reduce, on the local gradient: edit `param.grad` there and "
               "let DDP average it; do not all-reduce it yourself.",
    },
}

_PARAM_ITERATORS = frozenset({"parameters", "named_parameters"})
_MODULE_ITERATORS = frozenset({"modules", "named_modules", "children", "named_children"})
_MAX_DEPTH = 8


@dataclass(frozen=True)
class Path:
    """A module (or parameter) reached from ``roots`` through ``steps``; a step is a
    name, ``*`` (any one step) or ``**`` (any number of steps)."""

    roots: frozenset
    steps: tuple[str, ...]

    def child(self, *steps: str) -> "Path":
        return Path(self.roots, self.steps + steps)


@dataclass(frozen=True)
class Wrap:
    engine: str  # "ddp" or "fsdp2"
    call: ast.Call
    path: Path

    @property
    def api(self) -> str:
        return "DistributedDataParallel" if self.engine == "ddp" else "fully_shard"


def covers(wrap: tuple[str, ...], target: tuple[str, ...]) -> bool:
    """Whether some module the ``target`` steps can reach lies at or under the module
    the ``wrap`` steps reach (``wrap`` is a prefix of it)."""
    if not wrap:
        return True
    if not target:
        return wrap[0] == "**" and covers(wrap[1:], target)
    w, t = wrap[0], target[0]
    if t == "**":
        return covers(wrap, target[1:]) or covers(wrap[1:], target)
    if w == "**":
        return covers(wrap[1:], target) or covers(wrap, target[1:])
    if w == "*" or t == "*" or w == t:
        return covers(wrap[1:], target[1:])
    return False


class Wraps:
    """The DDP and FSDP2 wraps of one file, computed once per file on demand."""

    def __init__(self, model: SemanticModel, inference: Inference):
        self.model = model
        self.inference = inference

    @cached_property
    def all(self) -> list[Wrap]:
        found = []
        for calls in list(self.model.name_calls.values()) + [self.model.method_calls.get(n, [])
                                                              for n in ("DistributedDataParallel", "fully_shard")]:
            for call in calls:
                engine = self.engine_of_call(call)
                if engine is None or not call.args:
                    continue
                path = self.path_of(call.args[0])
                if path is not None:
                    found.append(Wrap(engine, call, path))
        found.sort(key=lambda w: (w.call.lineno, w.call.col_offset))
        return found

    def engine_of_call(self, call: ast.Call) -> str | None:
        qual = self.model.qualify(call.func)
        if qual in DDP_NAMES:
            return "ddp"
        if qual in FSDP2_NAMES:
            return "fsdp2"
        return None

    def engines(self) -> set[str]:
        return {w.engine for w in self.all}

    def covering(self, target: Path | None, engine: str) -> Wrap | None:
        """The first wrap of ``engine`` that covers ``target``."""
        if target is None:
            return None
        for wrap in self.all:
            if wrap.engine == engine and wrap.path.roots & target.roots and covers(wrap.path.steps, target.steps):
                return wrap
        return None

    # -- paths -------------------------------------------------------------------
    def path_of(self, expr: ast.AST, depth: int = 0) -> Path | None:
        """The module path of ``expr`` (a module expression), or None when unknown."""
        if depth > _MAX_DEPTH:
            return None
        steps: list[str] = []
        cur = expr
        while True:
            if isinstance(cur, ast.Attribute):
                steps.append(cur.attr)
                cur = cur.value
            elif isinstance(cur, ast.Subscript):
                index = cur.slice
                steps.append(str(index.value) if isinstance(index, ast.Constant)
                             and isinstance(index.value, (int, str)) else "*")
                cur = cur.value
            elif isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute) \
                    and cur.func.attr == "get_submodule" and len(cur.args) == 1:
                target = cur.args[0]
                names = target.value.split(".") if isinstance(target, ast.Constant) \
                    and isinstance(target.value, str) else ["**"]
                steps.extend(reversed(names))
                cur = cur.func.value
            else:
                break
        steps.reverse()
        if isinstance(cur, ast.Call):  # `DDP(Net())`: an instance of a class of this file
            value = self.inference.infer(cur)
            if isinstance(value, ModuleValue) and value.local_class is not None:
                return Path(frozenset({("class", value.local_class.node)}), tuple(steps))
            return None
        if not isinstance(cur, ast.Name):
            return None
        base = self._name_path(cur, depth)
        if base is None:
            return None
        return self._strip_ddp(base, tuple(steps))

    def parameter_module_path(self, expr: ast.AST) -> Path | None:
        """The path of the module owning the parameter ``expr`` is (``model.fc.weight``:
        ``model.fc``; ``p`` of ``for p in model.parameters()``: under ``model``)."""
        if isinstance(expr, ast.Attribute):
            return self.path_of(expr.value)
        if isinstance(expr, ast.Name):
            for binding in self.model.bindings_at(expr):
                value = binding.value
                if binding.kind == "for" and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                        and value.func.attr in _PARAM_ITERATORS:
                    owner = self.path_of(value.func.value)
                    return owner.child("**") if owner is not None else None
                if binding.kind == "assign" and not binding.path and isinstance(value, ast.Attribute):
                    return self.path_of(value.value)
        return None

    def _strip_ddp(self, base: tuple[Path, bool], steps: tuple[str, ...]) -> Path:
        path, is_ddp = base
        if is_ddp and steps[:1] == ("module",):
            steps = steps[1:]
        return path.child(*steps)

    def _name_path(self, name: ast.Name, depth: int) -> tuple[Path, bool] | None:
        """(path, whether the name holds a DDP wrapper) for a bare name."""
        roots: set = set()
        scope = self.model.scope_of(name)
        bindings = self.model.bindings_at(name) if hasattr(name, "_hl_scope") else []
        if name.id == "self":
            owner = self.model.enclosing_class(name)
            if owner is None:
                return None
            return Path(frozenset({("class", owner.node)}), ()), False
        if not bindings:
            return None
        defining = bindings[0].scope
        for binding in bindings:
            value = binding.value
            if binding.kind == "for" and isinstance(value, ast.AST) and not binding.path:
                # `for layer in model.layers` / `for m in model.modules()`
                if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                        and value.func.attr in _MODULE_ITERATORS:
                    owner = self.path_of(value.func.value, depth + 1)
                    return (owner.child("**"), False) if owner is not None else None
                owner = self.path_of(value, depth + 1)
                return (owner.child("*"), False) if owner is not None else None
            if binding.kind == "for" and binding.path == (1,) and isinstance(value, ast.Call) \
                    and isinstance(value.func, ast.Attribute) and value.func.attr in ("named_modules",
                                                                                      "named_children"):
                owner = self.path_of(value.func.value, depth + 1)
                return (owner.child("**"), False) if owner is not None else None
            if binding.kind == "assign" and not binding.path and isinstance(value, ast.Call) and value.args:
                engine = self.engine_of_call(value)
                if engine is not None:  # `model = DDP(model)`, `model = fully_shard(model)`
                    inner = self.path_of(value.args[0], depth + 1)
                    return (inner, engine == "ddp") if inner is not None else None
            if binding.kind == "assign" and not binding.path and isinstance(value, (ast.Attribute, ast.Subscript)):
                inner = self.path_of(value, depth + 1)  # `block = model.layers[0]`
                return (inner, False) if inner is not None else None
        roots.add(("name", id(defining.node), name.id))
        value = self.inference.infer(name)
        if isinstance(value, ModuleValue) and value.local_class is not None and value.applied_from is None:
            roots.add(("class", value.local_class.node))
        del scope
        return Path(frozenset(roots), ()), False


def wraps_of(ctx) -> Wraps | None:
    """The file's wraps, computed once per file; None when its text cannot show one
    (no `DistributedDataParallel`, no `fully_shard`): most files, answered without a walk."""
    if "_hl_wraps" not in ctx.__dict__:
        text = ctx.text
        shows = any(word in text for word in DDP_TRIGGERS[:1] + FSDP2_TRIGGERS)
        ctx.__dict__["_hl_wraps"] = Wraps(ctx.model, ctx.inference) if shows else None
    return ctx.__dict__["_hl_wraps"]


def call_text(call: ast.Call) -> str:
    """``fully_shard(model.layer)`` as written, or ``fully_shard(...)`` when long."""
    text = short_source(call)
    return text if len(text) <= 60 and "\n" not in text else f"{short_source(call.func)}(...)"


def module_target_path(wraps: Wraps, reg):
    """Where a module hook's target sits among the file's wraps: the hooked
    module's path, or every submodule (``**``) of what ``model.apply(fn)`` was
    called on; None when the file does not show it."""
    module = reg.receiver_module
    if module is not None and module.applied_from is not None:
        applied = wraps.path_of(module.applied_from)
        return applied.child("**") if applied is not None else None
    return wraps.path_of(reg.receiver) if reg.receiver is not None else None


def engines_of_registrations(ctx, regs) -> set[str]:
    """The engines ("ddp", "fsdp2") the file shows wrapping the targets of ``regs``."""
    wraps = wraps_of(ctx)
    if wraps is None or not wraps.all:
        return set()
    found = set()
    for reg in regs:
        if reg.is_global:
            found |= wraps.engines()
            continue
        if reg.kind.is_module:
            target = module_target_path(wraps, reg)
        else:
            target = wraps.parameter_module_path(reg.receiver) if reg.receiver is not None else None
        for engine in ("ddp", "fsdp2"):
            if wraps.covering(target, engine) is not None:
                found.add(engine)
    return found
