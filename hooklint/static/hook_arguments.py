"""What a forward hook assumes about its arguments, and which modules it runs on.

A forward hook on every module of a model it did not build (a summary,
profiler or feature tool walking the caller's model) is called with each
module's real arguments and outputs: a tuple from ``nn.LSTM`` or
``nn.MultiheadAttention``, a ``ModelOutput`` or dict from a transformer
block, ``None``, and an empty ``input`` tuple for a module called with
keyword arguments only.  Two questions:

- :func:`on_every_module`: is the hooked module each module of a
  caller-supplied model, unfiltered by type (``model.modules()``,
  ``named_modules()``, ``children()``, ``model.apply(fn)``, or a local walker
  that calls ``fn(module)`` and recurses over ``named_children()``)?
- :func:`tensor_assumptions`: where does the hook body treat ``output`` (or
  ``input[0]``) as a tensor (``.shape``, ``.size()``, ``.dtype``...) with no
  ``isinstance``/``is_tensor``/``hasattr`` test of it anywhere in the body?
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.static.flow import executed_nodes
from hooklint.static.outside import outside_root
from hooklint.static.semantic import FunctionNode, positional_params

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext
    from hooklint.static.hooks import Registration

# Attributes and methods only a tensor has among the values a module returns
# (tuples, lists, dicts, dataclasses, None).
TENSOR_ONLY = frozenset({
    "shape", "size", "dim", "ndim", "numel", "nelement", "dtype", "device", "detach", "cpu", "cuda", "clone",
    "element_size", "is_cuda", "data", "float", "half", "double", "mean", "sum", "norm", "abs", "view", "reshape",
    "flatten", "register_hook", "requires_grad", "grad_fn", "item", "std", "var", "argmax", "softmax", "permute",
    "transpose", "contiguous", "new_zeros", "numpy", "squeeze", "unsqueeze",
})
_STRUCTURE_TESTS = frozenset({"isinstance", "hasattr", "type", "is_tensor", "is_tensor_like", "callable"})
_WALK_ITERATORS = frozenset({"named_children", "children", "named_modules", "modules"})


@dataclass(frozen=True)
class TensorAssumption:
    node: ast.AST  # the attribute access
    role: str  # "output" or "input"
    text: str  # "`out.shape`"


def on_every_module(ctx: "FileContext", reg: "Registration") -> str | None:
    """How the hooked module is each module of a caller's model (words for a
    message), or None when the file shows which modules (or their types)."""
    value = reg.receiver_value
    if reg.receiver is None or getattr(value, "narrowing", None) is not None:
        return None
    if _type_filtered(reg.call, reg.receiver):
        return None
    if getattr(value, "torch_class", None) or getattr(value, "local_class", None):
        return None
    applied = getattr(value, "applied_from", None)
    if applied is not None:
        found = outside_root(ctx.model, ctx.inference, applied)
        return f"every submodule of `{ast.unparse(applied)}` ({found[0]})" if found else None
    description = getattr(value, "description", "") or ""
    if description.startswith(("each module of", "each child of")):
        found = outside_root(ctx.model, ctx.inference, reg.receiver)
        return f"{description} ({found[0]})" if found else None
    return _walked(ctx, reg.receiver)


def _type_filtered(call: ast.AST, receiver: ast.AST) -> bool:
    """An enclosing test looks at the module's type (``isinstance(m, kinds)``,
    ``type(m) in handlers``, ``m.__class__``), even one the static layer
    cannot resolve: the registration knows its modules."""
    if not isinstance(receiver, ast.Name):
        return False
    cur, child = getattr(call, "_hl_parent", None), call
    while cur is not None and not isinstance(cur, FunctionNode):
        if _exits_unless_type(cur, child, receiver.id):
            return True
        tests = []
        if isinstance(cur, (ast.If, ast.IfExp)) and child is not cur.test:
            tests.append(cur.test)
        if isinstance(cur, ast.comprehension):
            tests.extend(cur.ifs)
        if isinstance(cur, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            tests.extend(t for gen in cur.generators for t in gen.ifs)
        if any(_tests_type(t, receiver.id) for t in tests):
            return True
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return cur is not None and _exits_unless_type(cur, child, receiver.id)


def _exits_unless_type(block_owner: ast.AST, child: ast.AST, name: str) -> bool:
    """An earlier statement of the block that holds ``child`` leaves unless the
    module has some types: ``if not isinstance(m, kinds): return`` (or
    ``continue``, ``raise``), so the rest of the block only sees ``kinds``.
    ``if isinstance(m, nn.Sequential): return`` only excludes a type and
    does not count."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(block_owner, field, None)
        if not isinstance(block, list) or child not in block:
            continue
        for earlier in block[:block.index(child)]:
            if not (isinstance(earlier, ast.If) and not earlier.orelse and earlier.body
                    and isinstance(earlier.body[-1], (ast.Return, ast.Continue, ast.Raise))):
                continue
            test = earlier.test
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) \
                    and _tests_type(test.operand, name, top=test):
                return True
    return False


def _tests_type(test: ast.AST, name: str, top: ast.AST | None = None) -> bool:
    """A test that admits only some types (``not isinstance(m, nn.Sequential)``
    only excludes containers: the other modules are still anything).  ``top``
    is a negation the caller has already accounted for."""
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "type") \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == name:
            parent = getattr(node, "_hl_parent", None)
            if parent is not top and isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
                continue
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("__class__", "__name__") \
                and isinstance(node.value, ast.Name) and node.value.id == name:
            return True
    return False


def dispatches_on_module_type(hook: ast.AST, module: str | None) -> bool:
    """The hook body looks at the module's type (``isinstance(module, nn.Linear)``,
    ``handlers[type(m)]``): it handles the modules it knows."""
    if module is None:
        return False
    for node in executed_nodes(hook):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
                and isinstance(node.args[0], ast.Name) and node.args[0].id == module):
            continue
        if node.func.id == "isinstance":
            return True
        parent = getattr(node, "_hl_parent", None)
        if node.func.id == "type" and isinstance(parent, (ast.Subscript, ast.Compare)):
            return True  # `handlers[type(m)]`, `type(m) in table`, `type(m) is nn.Linear`
    return False


def _walked(ctx: "FileContext", receiver: ast.AST) -> str | None:
    """``receiver`` is the first parameter of a function handed to a local
    walker ``walk(model, fn)`` that calls ``fn(module, ...)`` and recurses
    over ``module.named_children()``, called on a caller's model."""
    if not isinstance(receiver, ast.Name):
        return None
    bindings = ctx.model.bindings_at(receiver)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return None
    func = bindings[0].scope.node
    if not isinstance(func, FunctionNode) or positional_params(func)[:1] != [receiver.id]:
        return None
    for call in ctx.model.name_calls.values():
        for site in call:
            for index, arg in enumerate(site.args):
                if not (isinstance(arg, ast.Name) and arg.id == func.name):
                    continue
                walker = ctx.inference.callable_of(site.func)
                if walker is None or not isinstance(walker.node, FunctionNode):
                    continue
                params = positional_params(walker.node)
                if index >= len(params) or not _walks(walker.node, params, index):
                    continue
                model_arg = site.args[0] if site.args else None
                found = outside_root(ctx.model, ctx.inference, model_arg) if model_arg is not None else None
                if found is not None:
                    return f"each module of `{ast.unparse(model_arg)}` ({found[0]}), through `{walker.node.name}`"
    return None


def _walks(walker: ast.AST, params: list[str], fn_index: int) -> bool:
    """The walker calls its ``fn`` parameter with its module parameter and
    iterates the module's children (recursing, or over ``modules()``)."""
    if not params:
        return False
    module, fn = params[0], params[fn_index]
    calls_fn = iterates = False
    for node in executed_nodes(walker):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == fn \
                and node.args and isinstance(node.args[0], ast.Name):
            calls_fn = True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _WALK_ITERATORS and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == module:
            iterates = True
    return calls_fn and iterates


def tensor_assumptions(hook: ast.AST, output: str | None, inputs: str | None) -> list[TensorAssumption]:
    """Uses of ``output`` (or of ``inputs[0]``) as a tensor in the hook body,
    when the body never tests what they are."""
    out: list[TensorAssumption] = []
    for name, role in ((output, "output"), (inputs, "input")):
        if name is None or _rebound(hook, name):
            continue
        if _tested(hook, name):
            if role == "output":
                partial = _past_sequence_test(hook, name)
                out.extend({found.role: found for found in reversed(partial)}.values())  # the first of each role
            continue
        for node in executed_nodes(hook):
            if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
                continue
            parent = getattr(node, "_hl_parent", None)
            if role == "output":
                if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in TENSOR_ONLY:
                    out.append(TensorAssumption(parent, role, f"`{ast.unparse(parent)}`"))
                    break
            else:
                # `inputs[0].shape`, `inputs[0][0].size()`
                if isinstance(parent, ast.Subscript) and parent.value is node and _is_zero(parent.slice):
                    top: ast.AST = parent
                    while isinstance(getattr(top, "_hl_parent", None), ast.Subscript) \
                            and top._hl_parent.value is top:  # type: ignore[attr-defined]
                        top = top._hl_parent  # type: ignore[attr-defined]
                    attr = getattr(top, "_hl_parent", None)
                    if isinstance(attr, ast.Attribute) and attr.value is top and attr.attr in TENSOR_ONLY:
                        out.append(TensorAssumption(attr, role, f"`{ast.unparse(attr)}`"))
                        break
    return out


def _tested(hook: ast.AST, name: str) -> bool:
    """The body tests the argument's kind or length somewhere (``isinstance(output, tuple)``,
    ``len(inputs)``, ``if output is None``), or catches errors around its use.  A test
    whose branch only reports and goes on (``if not isinstance(output, torch.Tensor):
    print(...)``) protects nothing: the uses after it run on every output."""
    ignored = _report_only_tests(hook)
    for node in executed_nodes(hook):
        if id(node) in ignored:
            continue
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if (called in _STRUCTURE_TESTS or called == "len") and any(
                    isinstance(a, ast.Name) and a.id == name for a in node.args):
                return True
        if isinstance(node, ast.Compare) and any(
                isinstance(n, ast.Name) and n.id == name for n in [node.left, *node.comparators]):
            return True
        if isinstance(node, ast.Try):
            return True
    return False


_REPORTERS = frozenset({"print", "warn", "warning", "info", "debug", "error", "log", "write", "exception"})


def _report_only_tests(hook: ast.AST) -> set[int]:
    """The nodes of ``if`` tests whose branch only prints or logs and falls
    through (no ``else``, no return, raise, continue or assignment)."""
    out: set[int] = set()
    for node in executed_nodes(hook):
        if not isinstance(node, ast.If) or node.orelse or not node.body:
            continue
        if all(isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
               and _called_name(stmt.value) in _REPORTERS for stmt in node.body):
            out.update(id(sub) for sub in ast.walk(node.test))
    return out


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


# Types a test can admit that leave a module's other outputs (dicts, `ModelOutput`, None) in its negative branch.
_SEQUENCE_TYPES = frozenset({"tuple", "list", "Sequence", "MutableSequence"})
_CATCHES = frozenset({"AttributeError", "Exception", "BaseException", "TypeError"})


def _past_sequence_test(hook: ast.AST, name: str) -> list[TensorAssumption]:
    """Uses of ``name`` as a tensor in the branch where the body's only test of
    it, ``isinstance(name, (tuple, list))``, failed: ``if isinstance(out,
    (list, tuple)): ... else: out.size()`` still gets a dict, a ``ModelOutput``
    or None there.  Nothing when the body tests the value any other way."""
    sequence_tests = []
    for node in executed_nodes(hook):
        if isinstance(node, ast.Call) and any(isinstance(a, ast.Name) and a.id == name for a in node.args):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called == "isinstance" and len(node.args) == 2 and _is_name(node.args[0], name) \
                    and _type_names(node.args[1]) and _type_names(node.args[1]) <= _SEQUENCE_TYPES:
                sequence_tests.append(node)
            elif called in _STRUCTURE_TESTS or called == "len":
                return []
        if isinstance(node, ast.Compare) and any(
                isinstance(n, ast.Name) and n.id == name for n in [node.left, *node.comparators]):
            return []
    out: list[TensorAssumption] = []
    for test in sequence_tests:
        branch = getattr(test, "_hl_parent", None)
        if not isinstance(branch, ast.If) or branch.test is not test:
            continue
        for stmt in branch.body:
            for node in ast.walk(stmt):
                # `out[0].size()`: an element of a tuple output (`nn.LSTM`'s `(h, c)`, a `PackedSequence`)
                if isinstance(node, ast.Attribute) and node.attr in TENSOR_ONLY \
                        and isinstance(node.value, ast.Subscript) and _is_name(node.value.value, name) \
                        and _index_constant(node.value.slice) and not _caught(node, hook):
                    out.append(TensorAssumption(node, "output-element", f"`{ast.unparse(node)}`"))
        for stmt in branch.orelse:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Attribute) and node.attr in TENSOR_ONLY and _is_name(node.value, name) \
                        and not _caught(node, hook):
                    out.append(TensorAssumption(node, "output-past-sequence-test", f"`{ast.unparse(node)}`"))
    return out


def _index_constant(index: ast.AST) -> bool:
    return isinstance(index, ast.Constant) and isinstance(index.value, int) and not isinstance(index.value, bool)


def _type_names(spec: ast.AST) -> set[str]:
    elts = spec.elts if isinstance(spec, ast.Tuple) else [spec]
    names = set()
    for elt in elts:
        if isinstance(elt, ast.Name):
            names.add(elt.id)
        elif isinstance(elt, ast.Attribute):
            names.add(elt.attr)
        else:
            return set()
    return names


def _caught(node: ast.AST, stop: ast.AST) -> bool:
    child, cur = node, getattr(node, "_hl_parent", None)
    while cur is not None and cur is not stop:
        if isinstance(cur, ast.ExceptHandler):
            return True  # the fallback of a `try` that already failed on the value
        if isinstance(cur, ast.Try) and child in cur.body and any(
                h.type is None or _type_names(h.type) & _CATCHES for h in cur.handlers):
            return True
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return False


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _rebound(hook: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in executed_nodes(hook))


def _is_zero(index: ast.AST) -> bool:
    return isinstance(index, ast.Constant) and index.value == 0


# ------------------------------------------------------------------ returned values

# Values no module returns as its output: Python scalars, strings, sizes.
_SCALAR_BUILTINS = frozenset({"len", "int", "float", "bool", "str", "round", "abs", "repr", "format"})
_SCALAR_METHODS = frozenset({"item", "numel", "nelement", "dim", "tolist", "size", "element_size", "count",
                             "index", "format", "join"})
_SCALAR_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "requires_grad"})


@dataclass(frozen=True)
class NonOutputReturn:
    node: ast.Return
    what: str  # "an `int` (`len(x)`)"


def non_output_returns(model, hook: ast.AST, params: list[str]) -> list[NonOutputReturn]:
    """``return`` statements of a forward hook (or pre-hook) whose value cannot
    be meant as the module's new output (or input): a Python scalar, a string,
    a size; or, in a hook that returns None on its other paths, the result of
    a function of this file that takes none of the hook's arguments and
    always returns a value (a counter's ``zero_ops()``)."""
    if isinstance(hook, ast.Lambda):
        returns = [ast.Return(value=hook.body, lineno=hook.body.lineno, col_offset=hook.body.col_offset)]
        falls_through = False
    elif isinstance(hook, FunctionNode):
        returns = [n for n in executed_nodes(hook) if isinstance(n, ast.Return)]
        falls_through = _falls_through(hook.body)
    else:
        return []
    none_path = falls_through or any(r.value is None or _is_none(r.value) for r in returns)
    out: list[NonOutputReturn] = []
    for ret in returns:
        value = ret.value
        if value is None or _is_none(value):
            continue
        what = _scalar(value)
        if what is None and none_path and not _mentions(value, params):
            what = _value_function(model, value)
        if what is not None:
            out.append(NonOutputReturn(ret, what))
    return out


def _scalar(value: ast.AST) -> str | None:
    if isinstance(value, ast.Constant) and not isinstance(value.value, type(None)):
        return f"a `{type(value.value).__name__}` (`{ast.unparse(value)}`)"
    if isinstance(value, ast.JoinedStr):
        return "a `str`"
    if isinstance(value, ast.Compare) or isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
        return f"a `bool` (`{ast.unparse(value)}`)"
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Name) and func.id in _SCALAR_BUILTINS:
            return f"a `{func.id if func.id != 'len' else 'int'}` (`{ast.unparse(value)}`)"
        if isinstance(func, ast.Attribute) and func.attr in _SCALAR_METHODS:
            return f"a Python value (`{ast.unparse(value)}`)"
    if isinstance(value, ast.Attribute) and value.attr in _SCALAR_ATTRIBUTES:
        return f"`{ast.unparse(value)}`"
    return None


def _value_function(model, value: ast.AST) -> str | None:
    """A call of a function defined in this file whose every return gives a value."""
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
        return None
    bindings = model.bindings_at(value.func)
    if len(bindings) != 1 or bindings[0].kind != "def" or not isinstance(bindings[0].node, FunctionNode):
        return None
    func = bindings[0].node
    returns = [n for n in executed_nodes(func) if isinstance(n, ast.Return)]
    if not returns or _falls_through(func.body) or any(r.value is None or _is_none(r.value) for r in returns):
        return None
    return f"the value of `{ast.unparse(value)}` (`{func.name}` always returns one)"


def _mentions(value: ast.AST, names: list[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(value))


def _is_none(value: ast.AST) -> bool:
    return isinstance(value, ast.Constant) and value.value is None


def _falls_through(body: list[ast.stmt]) -> bool:
    """Can the block end without a return or raise (so the function returns None)?"""
    if not body:
        return True
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return False
    if isinstance(last, ast.If):
        return _falls_through(last.body) or _falls_through(last.orelse)
    if isinstance(last, (ast.With, ast.AsyncWith)):
        return _falls_through(last.body)
    if isinstance(last, ast.Try):
        return _falls_through(last.body + last.orelse) or any(_falls_through(h.body) for h in last.handlers)
    return True
