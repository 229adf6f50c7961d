"""What the values a custom ``autograd.Function``'s ``backward`` returns are made of.

Two questions the HKL5xx rules ask of one ``backward`` body:

- does a returned gradient depend on the incoming gradients at all
  (``GradFlow``)?  Autograd's chain rule makes each input's gradient a
  linear function of the upstream gradient; a gradient built only from saved
  tensors, constants and the *metadata* of the upstream gradient (its shape,
  dtype, device) ignores it;
- is a returned slot itself a tuple (``tuple_valued``)?  Autograd wants one
  tensor or ``None`` per input.

The dependence is computed flow-insensitively and leans towards "depends":
a name assigned from the gradient on any path, a buffer handed to a call
that also receives the gradient (a kernel writing its output in place), an
object whose method is called with the gradient (``buf.copy_(g)``,
``ctx.stash(g)``) and, after an opaque call that receives the gradient
(``torch.autograd.backward(out, g)``), every ``.grad`` read all count as
depending on it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Iterator

from hooklint.static.semantic import ClassInfo, SemanticModel, is_staticmethod, positional_params

# Attribute reads and method calls that give a tensor's metadata, not its values.
_META_ATTRS = frozenset({
    "shape", "device", "dtype", "ndim", "is_cuda", "layout", "requires_grad", "is_sparse", "is_quantized",
    "is_meta", "names",
})
_META_METHODS = frozenset({
    "size", "dim", "numel", "stride", "is_contiguous", "get_device", "element_size", "data_ptr", "nelement",
    "new_zeros", "new_ones", "new_empty", "new_full", "is_floating_point", "is_complex", "storage_offset",
})
# torch functions whose first argument gives only a shape / dtype / device.
_LIKE_FUNCTIONS = frozenset(f"torch.{n}" for n in (
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
))
_META_BUILTINS = frozenset({"builtins.len", "builtins.isinstance", "builtins.type", "builtins.id"})
# Calls whose result is zero whatever their arguments.
_ZERO_FUNCTIONS = frozenset({"torch.zeros", "torch.zeros_like"})
_ZERO_METHODS = frozenset({"new_zeros", "zero_"})
# Calls made for their side effect on the outside world only: a gradient handed to them writes nothing back.
_LOGGING = frozenset({"builtins.print", "warnings.warn", "torch._assert"})
# Calls certainly returning a tuple (or list) of tensors.
_TUPLE_FUNCTIONS = frozenset({
    "torch.autograd.grad", "torch.split", "torch.chunk", "torch.unbind", "torch.tensor_split",
    "torch.autograd.functional.vjp", "torch.func.vjp",
})
_TUPLE_METHODS = frozenset({"split", "chunk", "unbind", "tensor_split"})


@dataclass
class FunctionBackward:
    """A custom Function's static ``backward``, with ``forward``'s inputs when they can be listed."""

    info: ClassInfo
    backward: ast.FunctionDef | ast.AsyncFunctionDef
    inputs: list[str] | None  # None: forward takes *args (or is inherited from elsewhere)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def grad_params(self) -> list[str]:
        """The parameters that receive the upstream gradients (``*grads`` included)."""
        names = positional_params(self.backward)[1:]
        vararg = self.backward.args.vararg
        return names + ([vararg.arg] if vararg is not None else [])

    def input_word(self, index: int) -> str:
        if self.inputs is not None and 0 <= index < len(self.inputs):
            return f"`{self.inputs[index]}` (input {index})"
        return f"input {index}"


def function_backwards(model: SemanticModel) -> list[FunctionBackward]:
    """Every custom Function class of the file with its own static ``backward``;
    ``forward`` may take ``*args`` or come from a base class."""
    out = []
    for info in model.classes.values():
        if not model.is_autograd_function_class(info):
            continue
        backward = info.methods.get("backward")  # its own: an inherited one is checked in its class
        if backward is None or not is_staticmethod(backward):
            continue
        forward = info.method("forward")
        inputs: list[str] | None = None
        if forward is not None and is_staticmethod(forward) and forward.args.vararg is None \
                and not forward.args.kwonlyargs:
            params = positional_params(forward)
            inputs = params if info.method("setup_context") is not None else params[1:]
        out.append(FunctionBackward(info, backward, inputs))
    return out


def _base_names(expr: ast.AST) -> Iterator[str]:
    """The local names an argument or assignment target reaches into (``buf``, ``out[i]`` -> ``out``,
    ``ctx.grads`` -> ``ctx``, ``(a, b)`` -> both)."""
    if isinstance(expr, ast.Name):
        yield expr.id
    elif isinstance(expr, (ast.Attribute, ast.Subscript)):
        yield from _base_names(expr.value)
    elif isinstance(expr, ast.Starred):
        yield from _base_names(expr.value)
    elif isinstance(expr, (ast.Tuple, ast.List)):
        for elt in expr.elts:
            yield from _base_names(elt)


class GradFlow:
    """Which names of one ``backward`` can carry the values of its gradient parameters."""

    def __init__(self, backward: ast.FunctionDef | ast.AsyncFunctionDef, grad_params: list[str],
                 qualify: Callable[[ast.AST], str | None]):
        self.backward = backward
        self.qualify = qualify
        self.tainted: set[str] = set(grad_params)
        self.grad_written = False  # an opaque call received the gradient: `.grad` reads may hold it
        nodes = list(ast.walk(backward))
        changed = True
        while changed:
            before = (len(self.tainted), self.grad_written)
            for node in nodes:
                self._step(node)
            changed = (len(self.tainted), self.grad_written) != before

    def _taint(self, targets: ast.AST) -> None:
        self.tainted.update(_base_names(targets))

    def _step(self, node: ast.AST) -> None:
        if isinstance(node, ast.Assign):
            if self.depends(node.value):
                for target in node.targets:
                    self._taint(target)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            if node.value is not None and self.depends(node.value):
                self._taint(node.target)
        elif isinstance(node, ast.NamedExpr):
            if self.depends(node.value):
                self._taint(node.target)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            if self.depends(node.iter):
                self._taint(node.target)
        elif isinstance(node, ast.withitem):
            if node.optional_vars is not None and self.depends(node.context_expr):
                self._taint(node.optional_vars)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and node is not self.backward:
            # a closure that reads the gradient: calling it can hand the gradient on
            if any(isinstance(n, ast.Name) and n.id in self.tainted for n in ast.walk(node)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.tainted.add(node.name)
        elif isinstance(node, ast.Call):
            args = [*node.args, *(k.value for k in node.keywords)]
            if not any(self.depends(a) for a in args):
                return
            qual = self.qualify(node.func)
            if qual in _LOGGING or (qual or "").startswith("logging."):
                return
            for arg in args:  # output buffers (or views of them): a kernel or helper may write the gradient into them
                self.tainted.update(n.id for n in ast.walk(arg) if isinstance(n, ast.Name))
            if isinstance(node.func, ast.Attribute):  # `buf.copy_(g)`, `saved.append(g)`, `ctx.keep(g)`
                self._taint(node.func.value)
            if isinstance(getattr(node, "_hl_parent", None), ast.Expr):
                self.grad_written = True

    def depends(self, expr: ast.AST | None) -> bool:
        """Whether ``expr`` can carry the values of the upstream gradient."""
        if expr is None:
            return False
        stack = [expr]
        while stack:
            cur = stack.pop()
            if isinstance(cur, ast.Name):
                if cur.id in self.tainted:
                    return True
                continue
            if isinstance(cur, ast.Attribute):
                if cur.attr in _META_ATTRS:
                    continue
                if cur.attr == "grad" and self.grad_written:
                    return True
                stack.append(cur.value)
                continue
            if isinstance(cur, ast.Call):
                func = cur.func
                rest: list[ast.AST] = [*cur.args, *(k.value for k in cur.keywords)]
                if isinstance(func, ast.Attribute) and func.attr in _META_METHODS:
                    stack.extend(rest)  # the receiver gives a shape; `new_full(size, fill)` reads `fill`
                    continue
                qual = self.qualify(func)
                if qual in _META_BUILTINS:
                    continue
                if qual in _LIKE_FUNCTIONS:
                    stack.extend(rest[1:])
                    continue
                stack.append(func)
                stack.extend(rest)
                continue
            if isinstance(cur, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in cur.ops):
                continue  # `g is None` says nothing of its values
            stack.extend(ast.iter_child_nodes(cur))
        return False


def zero_valued(expr: ast.AST, model: SemanticModel, flow: GradFlow) -> bool:
    """A zero gradient (a linear map too): ``0``, ``torch.zeros(...)``, ``x.new_zeros(...)``, or a name
    bound only to those and never written into afterwards."""
    if isinstance(expr, ast.Constant):
        return expr.value == 0 and not isinstance(expr.value, str)
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in _ZERO_METHODS:
            return True
        return model.qualify(func) in _ZERO_FUNCTIONS
    if isinstance(expr, ast.IfExp):
        return all(zero_valued(e, model, flow) or _is_none(e) for e in (expr.body, expr.orelse))
    if isinstance(expr, ast.Name):
        bindings = model.bindings_at(expr)
        values = [bound_value(b) for b in bindings]
        if not values or not all(v is not None and (zero_valued(v, model, flow) or _is_none(v)) for v in values):
            return False
        return not _written_into(expr.id, flow.backward)
    return False


def _is_none(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def bound_value(binding) -> ast.AST | None:
    """The expression an assignment gives a name, through tuple unpacking of a display
    (``a, b = None, x`` gives ``b`` the ``x``); None when unknown."""
    if binding.kind != "assign" or not isinstance(binding.value, ast.AST):
        return None
    value = binding.value
    for index in binding.path:
        if not isinstance(value, (ast.Tuple, ast.List)) or index >= len(value.elts) \
                or any(isinstance(e, ast.Starred) for e in value.elts):
            return None
        value = value.elts[index]
    return value


def reads_outside_state(expr: ast.AST, model: SemanticModel, backward: ast.AST) -> bool:
    """Whether ``expr``, or what the names it reads were assigned in ``backward``, reads state kept outside
    the Function's ``ctx``: a global or a class attribute that the training loop may set (Megatron scales
    an injected auxiliary-loss gradient by a class attribute it updates with the loss scale).  Imported
    names (``torch.float16``, ``math.pi``) and functions that are called do not count."""
    seen: set[int] = set()
    stack = [expr]
    while stack:
        cur = stack.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        for node in ast.walk(cur):
            if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
                continue
            parent = getattr(node, "_hl_parent", None)
            if isinstance(parent, ast.Call) and parent.func is node:
                continue
            bindings = model.bindings_at(node)
            for b in bindings:
                if b.kind == "import":
                    continue
                scope, inside = b.scope, False
                while scope is not None and not inside:
                    inside = scope.node is backward
                    scope = scope.parent if scope.kind in ("comprehension", "lambda") else None
                if not inside:
                    if b.kind in ("def",) and isinstance(parent, ast.Attribute) and isinstance(
                            getattr(parent, "_hl_parent", None), ast.Call):
                        continue
                    return True
                value = bound_value(b) if b.kind == "assign" else None
                if value is not None:
                    stack.append(value)
                elif b.kind in ("for", "augassign", "assign") and isinstance(b.value, ast.AST):
                    stack.append(b.value)
    return False


def _written_into(name: str, func: ast.AST) -> bool:
    """Whether ``name``'s object can be changed after it is made: an in-place method, an item store,
    an augmented assignment, or being handed to a call (which may fill it)."""
    for node in ast.walk(func):
        if isinstance(node, ast.AugAssign) and name in set(_base_names(node.target)):
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, (ast.Subscript, ast.Attribute)) and name in set(_base_names(t)) for t in targets):
                return True
        if isinstance(node, ast.Call):
            func_expr = node.func
            if isinstance(func_expr, ast.Attribute) and isinstance(func_expr.value, ast.Name) \
                    and func_expr.value.id == name and func_expr.attr.endswith("_") \
                    and func_expr.attr not in ("zero_", "requires_grad_"):
                return True
            if any(isinstance(a, ast.Name) and a.id == name for a in node.args) or \
                    any(isinstance(k.value, ast.Name) and k.value.id == name for k in node.keywords):
                return True
    return False


def returned_slots(value: ast.AST, model: SemanticModel, depth: int = 0) -> list[tuple[int | None, ast.AST]]:
    """The gradients a returned expression holds, each with its position (None once a ``*`` part or a
    part of unknown length came before): a tuple display, ``(None,) + (...)``, or a name bound to one."""
    if depth > 4:
        return []
    if isinstance(value, (ast.Tuple, ast.List)):
        out: list[tuple[int | None, ast.AST]] = []
        known = True
        for i, elt in enumerate(value.elts):
            if isinstance(elt, ast.Starred):
                known = False
                continue
            out.append((i if known else None, elt))
        return out
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        left = returned_slots(value.left, model, depth + 1)
        right = returned_slots(value.right, model, depth + 1)
        left_closed = isinstance(value.left, (ast.Tuple, ast.List)) and \
            not any(isinstance(e, ast.Starred) for e in value.left.elts)
        shift = len(value.left.elts) if left_closed else None  # type: ignore[attr-defined]
        return left + [((i + shift) if (i is not None and shift is not None) else None, e) for i, e in right]
    if isinstance(value, ast.Name):
        bindings = model.bindings_at(value)
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                and isinstance(bindings[0].value, (ast.Tuple, ast.List, ast.BinOp)):
            return returned_slots(bindings[0].value, model, depth + 1)
        return []
    return []


def tuple_valued(expr: ast.AST, model: SemanticModel, depth: int = 0) -> str | None:
    """How ``expr`` is certainly a tuple or list (a short description), or None: a display, a call of
    ``torch.autograd.grad`` / ``split`` / ``chunk`` / ``unbind``, a call of a function of this file whose
    every ``return`` is a display of two or more values, or a name bound only to one of those."""
    if depth > 4:
        return None
    if isinstance(expr, (ast.Tuple, ast.List)):
        return "a tuple display" if isinstance(expr, ast.Tuple) else "a list display"
    if isinstance(expr, ast.Call):
        func = expr.func
        qual = model.qualify(func)
        if qual in _TUPLE_FUNCTIONS:
            return f"`{qual}(...)`, which returns a tuple"
        if isinstance(func, ast.Attribute) and func.attr in _TUPLE_METHODS and not expr.keywords \
                and qual is None:
            return None  # `x.split(...)` on an unknown receiver: a str has `split` too
        if isinstance(func, ast.Name):
            bindings = model.bindings_at(func)
            if len(bindings) == 1 and bindings[0].kind == "def":
                n = _display_arity(bindings[0].node)
                if n is not None:
                    return f"the result of `{func.id}(...)`, which returns {n} values"
        return None
    if isinstance(expr, ast.Name):
        bindings = model.bindings_at(expr)
        if not bindings or any(b.kind != "assign" or b.path or not isinstance(b.value, ast.AST) for b in bindings):
            return None
        kinds = [tuple_valued(b.value, model, depth + 1) for b in bindings]  # type: ignore[arg-type]
        if all(kinds):
            return kinds[0]
    return None


def _display_arity(func: ast.AST) -> int | None:
    """n when every ``return`` of ``func`` (not counting nested functions) returns a display of n >= 2
    values without ``*``; None otherwise (or when it can fall off its end without a value)."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    returns: list[ast.Return] = []
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
        if isinstance(node, ast.Return):
            returns.append(node)
        stack.extend(ast.iter_child_nodes(node))
    if not returns or not func.body or not isinstance(func.body[-1], (ast.Return, ast.Raise)):
        return None
    sizes = set()
    for ret in returns:
        if not isinstance(ret.value, ast.Tuple) or any(isinstance(e, ast.Starred) for e in ret.value.elts):
            return None
        sizes.add(len(ret.value.elts))
    if len(sizes) != 1:
        return None
    n = sizes.pop()
    return n if n >= 2 else None


# ------------------------------------------------ saved tensors compacted by a filter

@dataclass
class CompactedSave:
    """``forward`` saves a filtered subset of a sequence first (``save_for_backward(*kept, ...)`` with
    ``kept = [t for i, t in ... if mask[i]]``): positions in ``ctx.saved_tensors`` are not positions in
    the full sequence."""

    call: ast.Call  # the save_for_backward call
    kept: str  # the name of the filtered sequence
    masks: set[str]  # ctx attributes holding a full-length mask the filter reads (plus needs_input_grad)


def _filtered_comprehension(expr: ast.AST | None) -> ast.comprehension | None:
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("tuple", "list") \
            and len(expr.args) == 1:
        expr = expr.args[0]
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)) and len(expr.generators) == 1 and expr.generators[0].ifs:
        return expr.generators[0]
    return None


def compacted_save(info: ClassInfo, model: SemanticModel) -> CompactedSave | None:
    forward = info.method("forward")
    if forward is None or info.method("setup_context") is not None:
        return None
    params = positional_params(forward)
    if not params:
        return None
    ctx_name = params[0]
    for node in ast.walk(forward):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "save_for_backward" and isinstance(node.func.value, ast.Name)
                and node.func.value.id == ctx_name and node.args):
            continue
        first = node.args[0]
        if not isinstance(first, ast.Starred):
            continue
        if isinstance(first.value, ast.Name):
            comp = next((c for b in model.bindings_at(first.value)
                         if (c := _filtered_comprehension(bound_value(b))) is not None), None)
            kept = first.value.id
        else:
            comp, kept = _filtered_comprehension(first.value), "the filtered inputs"
        if comp is None:
            continue
        mask_names = {n.value.id for cond in comp.ifs for n in ast.walk(cond)
                      if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)}
        masks = {"needs_input_grad"}
        for stmt in ast.walk(forward):
            if not isinstance(stmt, ast.Assign):
                continue
            for target in stmt.targets:
                pairs = zip(target.elts, stmt.value.elts) if isinstance(target, ast.Tuple) and isinstance(
                    stmt.value, ast.Tuple) and len(target.elts) == len(stmt.value.elts) else [(target, stmt.value)]
                for t, v in pairs:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == ctx_name \
                            and isinstance(v, ast.Name) and v.id in mask_names:
                        masks.add(t.attr)
        return CompactedSave(node, kept, masks)
    return None


def misaligned_subscripts(backward: ast.AST, ctx_name: str, masks: set[str],
                          model: SemanticModel) -> list[tuple[ast.Subscript, str]]:
    """Subscripts ``seq[i]`` in ``backward`` where ``seq`` holds the compacted saved tensors (or the
    gradients ``torch.autograd.grad`` returns for them: one per element) and ``i`` runs over a
    full-length mask (``range(len(ctx.mask))``, ``enumerate(ctx.needs_input_grad)``)."""

    def is_mask(expr: ast.AST) -> bool:
        return isinstance(expr, ast.Attribute) and expr.attr in masks and isinstance(expr.value, ast.Name) \
            and expr.value.id == ctx_name

    def compacted_expr(expr: ast.AST | None, depth: int = 0) -> bool:
        if expr is None or depth > 4:
            return False
        if isinstance(expr, ast.Attribute) and expr.attr in ("saved_tensors", "saved_variables"):
            return True
        if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Slice) \
                and (expr.slice.lower is None or (isinstance(expr.slice.lower, ast.Constant)
                                                  and expr.slice.lower.value == 0)):
            return compacted_expr(expr.value, depth + 1)  # a prefix keeps the positions
        if isinstance(expr, ast.Call) and model.qualify(expr.func) == "torch.autograd.grad" and len(expr.args) > 1:
            return compacted_expr(expr.args[1], depth + 1)
        if isinstance(expr, ast.Name):
            bindings = model.bindings_at(expr)
            return bool(bindings) and all(starred_prefix(b, expr.id) or (
                (v := bound_value(b)) is not None and compacted_expr(v, depth + 1)) for b in bindings)
        return False

    def starred_prefix(binding, name: str) -> bool:
        """``*kept, out = <compacted>``: ``kept`` is a prefix of it."""
        node = binding.node
        if binding.kind != "assign" or not isinstance(node, ast.Assign) or len(node.targets) != 1:
            return False
        target = node.targets[0]
        return isinstance(target, (ast.Tuple, ast.List)) and bool(target.elts) \
            and isinstance(target.elts[0], ast.Starred) and isinstance(target.elts[0].value, ast.Name) \
            and target.elts[0].value.id == name and compacted_expr(node.value, 1)

    index_vars: set[str] = set()
    for node in ast.walk(backward):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Call):
            it = node.iter
            func = model.qualify(it.func)
            if func == "builtins.range" and len(it.args) == 1 and isinstance(it.args[0], ast.Call) \
                    and model.qualify(it.args[0].func) == "builtins.len" and it.args[0].args \
                    and is_mask(it.args[0].args[0]) and isinstance(node.target, ast.Name):
                index_vars.add(node.target.id)
            elif func == "builtins.enumerate" and it.args and is_mask(it.args[0]) \
                    and isinstance(node.target, ast.Tuple) and isinstance(node.target.elts[0], ast.Name):
                index_vars.add(node.target.elts[0].id)
    out = []
    if not index_vars:
        return out
    for node in ast.walk(backward):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) and node.slice.id in index_vars \
                and isinstance(node.value, ast.Name) and compacted_expr(node.value):
            out.append((node, node.value.id))
    return out
