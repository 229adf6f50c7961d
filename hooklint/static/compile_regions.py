"""Compiled calls and activation-checkpointed regions, as one file shows them.

Three questions, for the HKL7xx rules (docs/compile.md):

- Which calls run code compiled by ``torch.compile`` (``torch.compile(model)``
  and its handle, ``model.compile()``, a function decorated with or passed to
  ``torch.compile``), and which modules that code contains
  (:class:`CompiledCalls`).
- Which modules run inside an activation-checkpointed region
  (``torch.utils.checkpoint.checkpoint``, ``checkpoint_wrapper``,
  ``checkpoint_sequential``), and how the region is recomputed
  (:class:`CheckpointRegions`).
- Does a statement run after another one, in program order, in the same
  function (loops included: a statement earlier in a loop's body runs again
  after a later one, on the next iteration) (:func:`runs_after`).

Modules are named by :class:`ModuleRef`: the binding of a root name (or the
``self`` of a class) and an access path.  Only what the syntax shows is
answered; everything else is "unknown", and the rules stay quiet.  The module
is self-contained (it uses the semantic model and the value inference, no
other analysis) so that it can move onto a shared control-flow core later.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hooklint.static.flow import block_of, executed_nodes, function_of
from hooklint.static.semantic import ClassInfo, FunctionNode, positional_params
from hooklint.static.values import CallableValue, ModuleValue, src

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

# The prefilter pattern of the checkpoint rules (HKL702, HKL703): a checkpointed region the file shows,
# not `save_checkpoint(...)`.  It means `\bcheckpoint(?:_wrapper|_sequential)?\(|apply_activation_checkpointing`,
# written to begin with the literal word: the regex engine then jumps from one `checkpoint` to the next
# (35x faster on the corpus, where 1,600 files say `checkpoint`) instead of trying both branches at every position.
CHECKPOINT_REGION_PATTERN = (r"checkpoint(?:(?<=\bcheckpoint)(?:_wrapper|_sequential)?\("
                             r"|(?<=apply_activation_checkpoint)ing)")


COMPILE_FUNCTIONS = frozenset({"torch.compile"})
CHECKPOINT_FUNCTIONS = frozenset({"torch.utils.checkpoint.checkpoint"})
CHECKPOINT_SEQUENTIAL = frozenset({"torch.utils.checkpoint.checkpoint_sequential"})
CHECKPOINT_WRAPPERS = frozenset({
    "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.checkpoint_wrapper",
})
# Module methods that return the module itself: `model.to(device)` names the same tree.
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "eval", "train", "float", "double", "half", "bfloat16",
                           "requires_grad_", "type", "share_memory"})
# Attributes wrappers forward to the module they wrap (OptimizedModule, CheckpointWrapper).
_TRANSPARENT = frozenset({"._orig_mod", "._checkpoint_wrapped_module"})
# Classes of torch.nn whose forward dynamo inlines, hooks and all: the root of a compiled
# `nn.Sequential` does not run its hooks outside the compiled code.
_TORCH_CONTAINERS = ("torch.nn.",)
ANY_INDEX = "[*]"


# ------------------------------------------------------------------ module refs

@dataclass(frozen=True)
class ModuleRef:
    """A module the code names: ``root`` is the binding of the root name (its
    id), or ``("self", id(class node))`` for a method's own object; ``path``
    the steps after it (``.blocks``, ``[0]``, ``[*]`` for an index that is not
    a constant).  ``spread``: "" for exactly that module, "items" for each
    element of it (a loop over a ``ModuleList``), "submodules" for it and every
    module below it (``model.modules()``), "children" for the modules below it."""

    root: tuple
    path: tuple[str, ...]
    spread: str = ""

    def extend(self, steps: tuple[str, ...]) -> "ModuleRef | None":
        if not steps:
            return self
        if self.spread == "items":
            return ModuleRef(self.root, self.path + (ANY_INDEX,) + steps)
        if self.spread:
            return None  # a step below "any submodule": not a name we can compare
        return ModuleRef(self.root, self.path + steps)


def _steps(expr: ast.AST) -> tuple[ast.AST, tuple[str, ...]] | None:
    """(root expression, steps) for names, attributes and subscripts."""
    steps: list[str] = []
    while True:
        if isinstance(expr, ast.Attribute):
            steps.append("." + expr.attr)
            expr = expr.value
        elif isinstance(expr, ast.Subscript):
            index = expr.slice
            if isinstance(index, ast.Constant) and isinstance(index.value, (int, str)):
                steps.append(f"[{index.value!r}]")
            elif isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub) \
                    and isinstance(index.operand, ast.Constant) and isinstance(index.operand.value, int):
                steps.append(f"[{-index.operand.value!r}]")
            else:
                steps.append(ANY_INDEX)
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
                and expr.func.attr == "get_submodule" and len(expr.args) == 1 \
                and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, str):
            steps.extend(reversed(["." + part for part in expr.args[0].value.split(".") if part]))
            expr = expr.func.value
        else:
            break
    kept = tuple(s for s in reversed(steps) if s not in _TRANSPARENT)
    return expr, kept


class Refs:
    """Names modules: :meth:`ref` for an expression, :meth:`views` for the ways
    a registration's receiver can be compared with a region defined in a
    class's own methods."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self._cache: dict[int, ModuleRef | None] = {}
        self._bindings: dict[int, object] = {}  # id -> the binding a ref's root is

    def ref(self, expr: ast.AST | None, depth: int = 0) -> ModuleRef | None:
        if expr is None or depth > 6:
            return None
        key = id(expr)
        if key not in self._cache:
            self._cache[key] = None  # recursion guard
            self._cache[key] = self._ref(expr, depth)
        return self._cache[key]

    def _ref(self, expr: ast.AST, depth: int) -> ModuleRef | None:
        # `model.to(device)`, `torch.compile(model)`, `checkpoint_wrapper(block)` name the same tree
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr in _RETURNS_SELF:
                return self.ref(func.value, depth + 1)
            qual = self.ctx.model.qualify(func)
            if qual in COMPILE_FUNCTIONS or qual in CHECKPOINT_WRAPPERS:
                return self.ref(expr.args[0], depth + 1) if expr.args else None
        found = _steps(expr)
        if found is None:
            return None
        root, steps = found
        if isinstance(root, ast.Call) and root is not expr:
            base = self.ref(root, depth + 1)
            return base.extend(steps) if base is not None else None
        if not isinstance(root, ast.Name) or not hasattr(root, "_hl_scope"):
            return None
        model = self.ctx.model
        bindings = model.bindings_at(root)
        if len(bindings) != 1:
            return None
        b = bindings[0]
        self._bindings[id(b)] = b
        if b.kind == "param":
            func = b.scope.node
            cls = model.enclosing_class(func)
            params = positional_params(func) if isinstance(func, FunctionNode) else []
            if cls is not None and params and params[0] == root.id and func in cls.methods.values() \
                    and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in func.decorator_list):
                return ModuleRef(("self", id(cls.node)), steps)
            return ModuleRef((id(b),), steps)
        if b.kind == "assign" and not b.path and isinstance(b.value, ast.expr) and b.value is not root:
            value = b.value
            if isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)) or (
                    isinstance(value, ast.Call) and self._transparent_call(value)):
                base = self.ref(value, depth + 1)
                if base is not None:
                    return base.extend(steps)
            return ModuleRef((id(b),), steps)
        if b.kind == "for" and isinstance(b.value, ast.AST):
            spread = self._loop_spread(b.value, b.path)
            if spread is not None:
                base, how = spread
                if not steps:
                    return ModuleRef(base.root, base.path, how)
                item = ModuleRef(base.root, base.path, how)
                return item.extend(steps) if how == "items" else None
            return None
        if b.kind in ("def", "class", "import"):
            return None
        return ModuleRef((id(b),), steps)

    def _transparent_call(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _RETURNS_SELF:
            return True
        qual = self.ctx.model.qualify(func)
        return qual in COMPILE_FUNCTIONS or qual in CHECKPOINT_WRAPPERS

    def _loop_spread(self, iterable: ast.AST, path: tuple[int, ...]) -> tuple[ModuleRef, str] | None:
        """A loop target's modules: ``for m in model.modules()`` -> (model, "submodules");
        ``for block in model.blocks`` / ``enumerate(model.blocks)`` -> (model.blocks, "items")."""
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate" \
                and iterable.args:
            if path[:1] != (1,):
                return None
            iterable, path = iterable.args[0], path[1:]
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute):
            method = iterable.func.attr
            named = method.startswith("named_")
            if method in ("modules", "named_modules", "children", "named_children"):
                if path != ((1,) if named else ()):
                    return None
                base = self.ref(iterable.func.value)
                if base is None or base.spread:
                    return None
                return base, "submodules" if method.endswith("modules") else "children"
            return None
        if path:
            return None
        base = self.ref(iterable)
        if base is None or base.spread:
            return None
        return base, "items"

    def _class_from_callers(self, binding) -> ClassInfo | None:
        """The local class every call of the function in this file passes for
        this (unannotated) parameter: ``steered_loss(model, ...)`` with ``model = Net()``."""
        func = binding.scope.node
        if not isinstance(func, FunctionNode) or self.ctx.model.enclosing_class(func) is not None:
            return None
        params = positional_params(func)
        if binding.name not in params:
            return None
        index = params.index(binding.name)
        found: ClassInfo | None = None
        sites = 0
        for call in self.ctx.model.name_calls.get(func.name, ()):
            bindings = self.ctx.model.bindings_at(call.func)  # type: ignore[arg-type]
            if len(bindings) != 1 or bindings[0].node is not func:
                continue
            if index >= len(call.args) or any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
                return None
            value = self.ctx.inference.infer(call.args[index])
            cls = value.local_class if isinstance(value, ModuleValue) else None
            if cls is None or (found is not None and cls is not found):
                return None
            found, sites = cls, sites + 1
        return found if sites else None

    def views(self, expr: ast.AST) -> list[ModuleRef]:
        """The refs of ``expr``: its own, and for each prefix whose class this
        file defines, the same module seen from that class's ``self``
        (``model.block.inner`` with ``model.block`` a ``Block``: ``self.inner`` of
        ``Block``), so that regions a class's methods define can be compared."""
        out: list[ModuleRef] = []
        own = self.ref(expr)
        if own is not None:
            out.append(own)
            # the root's own class (`for block in model.blocks: block.fc` with `model = Net()`)
            binding = self._bindings.get(own.root[0]) if len(own.root) == 1 else None
            if binding is not None:
                value = self.ctx.inference.value_of_binding(binding)  # type: ignore[arg-type]
                cls = value.local_class if isinstance(value, ModuleValue) else None
                if cls is None and getattr(binding, "kind", "") == "param":
                    cls = self._class_from_callers(binding)
                if cls is not None:
                    out.append(ModuleRef(("self", id(cls.node)), own.path, own.spread))
        found = _steps(expr)
        if found is None:
            return out
        _root, steps = found
        prefix: ast.AST = expr
        remaining: list[str] = []
        # walk outwards through the expression's prefixes
        for _ in range(len(steps) + 1):
            value = self.ctx.inference.infer(prefix)
            if isinstance(value, ModuleValue) and value.local_class is not None:
                out.append(ModuleRef(("self", id(value.local_class.node)), tuple(reversed(remaining))))
            if isinstance(prefix, ast.Attribute):
                remaining.append("." + prefix.attr)
                prefix = prefix.value
            elif isinstance(prefix, ast.Subscript):
                index = prefix.slice
                remaining.append(f"[{index.value!r}]" if isinstance(index, ast.Constant) else ANY_INDEX)
                prefix = prefix.value
            else:
                break
        return out


def is_compiled_handle(ctx: "FileContext", expr: ast.AST) -> bool:
    """``cmodel`` of ``cmodel = torch.compile(model)``: the wrapper, whose own hooks
    run in its ``__call__`` outside the compiled code (not its submodules')."""
    if not isinstance(expr, ast.Name) or not hasattr(expr, "_hl_scope"):
        return False
    bindings = ctx.model.bindings_at(expr)
    return bool(bindings) and all(
        b.kind == "assign" and isinstance(b.value, ast.Call) and ctx.model.qualify(b.value.func) in COMPILE_FUNCTIONS
        for b in bindings)


def _step_matches(inner: str, outer: str) -> bool:
    return inner == outer or outer == ANY_INDEX and inner.startswith("[")


def relation(inner: ModuleRef, outer: ModuleRef) -> str | None:
    """How the modules ``inner`` names sit in the tree ``outer`` names: "root"
    (``inner`` is the root of the tree, or each root of a spread), "below" (some
    of them are strictly inside), or None (not inside, or unknown)."""
    if inner.root != outer.root:
        return None
    p, q = outer.path, inner.path
    if outer.spread == "items":
        p = p + (ANY_INDEX,)
    elif outer.spread in ("submodules", "children"):
        if len(q) < len(p) or not all(_step_matches(a, b) for a, b in zip(q, p)):
            return None
        return "below" if len(q) > len(p) or inner.spread or outer.spread == "submodules" else None
    if inner.spread == "items":
        q = q + (ANY_INDEX,)
    if inner.spread in ("submodules", "children"):
        # every module below `q`: some are in the tree if `q` is in it, or if the tree is below `q`
        n = min(len(p), len(q))
        pairs = list(zip(q[:n], p[:n]))
        if all(_step_matches(a, b) for a, b in pairs) or all(_step_matches(b, a) for a, b in pairs):
            return "below"
        return None
    if len(q) < len(p) or not all(_step_matches(a, b) for a, b in zip(q, p)):
        return None
    return "root" if len(q) == len(p) else "below"


def first_step_below(inner: ModuleRef, outer: ModuleRef) -> str | None:
    """The step of ``inner``'s path right below the root of ``outer``
    (``.attn`` for ``model.blocks[0].attn.qkv`` in the region ``model.blocks[*]``)."""
    depth = len(outer.path) + (1 if outer.spread == "items" else 0)
    if inner.spread or len(inner.path) <= depth:
        return None
    return inner.path[depth]


# ------------------------------------------------------------------ program order

def _chain(node: ast.AST, stop: ast.AST | None) -> list[tuple[int, int, ast.stmt]]:
    """(id of block, index, statement) from the innermost statement holding ``node`` outwards."""
    out = []
    cur: ast.AST | None = node
    while cur is not None and cur is not stop:
        if isinstance(cur, ast.stmt):
            pos = block_of(cur)
            if pos is not None:
                out.append((id(pos[0]), pos[1], cur))
        if isinstance(cur, FunctionNode + (ast.Lambda, ast.ClassDef)) and cur is not node:
            break
        cur = getattr(cur, "_hl_parent", None)
    return out


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


@dataclass(frozen=True)
class Order:
    """``second`` runs after ``first``: "after" in straight-line order, or
    "next-iteration" (``second`` is earlier in a loop's body, and runs again
    after ``first`` on the loop's next iteration); ``loop`` is that loop."""

    how: str
    loop: ast.AST | None = None


def runs_after(first: ast.AST, second: ast.AST, given_first: bool = False) -> Order | None:
    """Does ``second`` run after ``first`` has run, in the same function?  None
    when they are in different functions, in two branches of an ``if``, or
    ``first`` is under a condition the other is not (it may not have run).
    ``given_first``: the question is whether ``second`` surely runs once
    ``first`` ran, so ``second`` must not be under a condition instead."""
    func = function_of(first)
    if func is not function_of(second) or first is second:
        return None
    a, b = _chain(first, func), _chain(second, func)
    b_blocks = {block: (index, stmt) for block, index, stmt in b}
    for level, (block, index, stmt) in enumerate(a):
        if block not in b_blocks:
            continue
        other_index, other_stmt = b_blocks[block]
        b_level = next(i for i, item in enumerate(b) if item[0] == block)
        if _conditional_between(b[:b_level] if given_first else a[:level]):
            return None
        if index < other_index or (index == other_index and _position(first) < _position(second)
                                   and stmt is other_stmt and _simple(stmt)):
            return Order("after")
        inner_first = a[level - 1][2] if level else first
        inner_second = b[b_level - 1][2] if b_level else second
        if index == other_index and stmt is other_stmt and _later_part(stmt, inner_first, inner_second):
            return Order("after")
        # `second` comes first in this block: on a later iteration of a loop holding both, it runs after
        loop = _enclosing_loop(stmt, func)
        inside_loop = [item for item in b if _inside(item[2], loop) and item[2] is not loop] if loop else []
        if loop is not None and not _conditional_between(inside_loop):
            return Order("next-iteration", loop)
        return None
    return None


def _later_part(stmt: ast.stmt, first: ast.AST, second: ast.AST) -> bool:
    """In one compound statement: does the part holding ``second`` run after the
    part holding ``first``?  A ``try``'s ``finally`` (and ``else``) after its body,
    a ``with``'s or loop's body items in order."""
    if isinstance(stmt, ast.Try):
        def part(node: ast.AST) -> int:
            if node in stmt.body:
                return 0
            if node in stmt.orelse:
                return 1
            if node in stmt.finalbody:
                return 2
            return -1
        a, b = part(first), part(second)
        return a >= 0 and b > a and (b == 2 or a == 0)
    return False


def _simple(stmt: ast.stmt) -> bool:
    return not any(isinstance(getattr(stmt, f, None), list) and getattr(stmt, f) and
                   isinstance(getattr(stmt, f)[0], ast.stmt) for f in ("body", "orelse", "finalbody", "handlers"))


def _inside(node: ast.AST, ancestor: ast.AST) -> bool:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None:
        if cur is ancestor:
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def _enclosing_loop(stmt: ast.AST, func: ast.AST | None) -> ast.AST | None:
    cur = getattr(stmt, "_hl_parent", None)
    child = stmt
    while cur is not None and cur is not func and not isinstance(cur, FunctionNode + (ast.Lambda, ast.ClassDef)):
        if isinstance(cur, (ast.For, ast.AsyncFor, ast.While)) and child in cur.body:
            return cur
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return None


def _conditional_between(chain: list[tuple[int, int, ast.stmt]]) -> bool:
    """Is a statement of the chain (from inside outwards, below the common
    block) a branch that may not run: inside an ``if``, a ``match`` case, an
    ``except`` handler, after a ``break`` or ``continue``?"""
    for _block, _index, stmt in chain:
        parent = getattr(stmt, "_hl_parent", None)
        if isinstance(parent, (ast.If, ast.IfExp, ast.match_case, ast.ExceptHandler)):
            return True
        if isinstance(parent, ast.Try) and stmt not in parent.body and stmt not in parent.finalbody:
            return True
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)) and stmt in parent.orelse:
            return True
    return False


# ------------------------------------------------------------------ compiled code

@dataclass
class Compiled:
    """A call that runs compiled code, and what that code contains."""

    call: ast.Call  # the call that runs it (`cmodel(x)`, `train_step(batch)`, `run(cmodel)`)
    trees: list[tuple[ModuleRef, bool]]  # the module trees traced, and whether the root's own hooks still fire
    compiled_by: ast.AST  # `torch.compile(...)`, `model.compile(...)` or the decorator
    how: str  # "module", "in place", "function"
    through: tuple[ast.Call, ...] = ()  # the calls of local functions that led to the compiled call


class CompiledCalls:
    """Every call of this file that runs code ``torch.compile`` traced."""

    def __init__(self, ctx: "FileContext", refs: Refs | None = None):
        self.ctx = ctx
        self.refs = refs or Refs(ctx)

    # -- what is compiled
    def _compile_calls(self) -> list[ast.Call]:
        model = self.ctx.model
        out = []
        for calls in model.method_calls.get("compile", ()), model.name_calls.get("compile", ()):
            for call in calls:
                if model.qualify(call.func) in COMPILE_FUNCTIONS:
                    out.append(call)
        return out

    def _function_node(self, expr: ast.AST) -> ast.AST | None:
        value = self.ctx.inference.infer(expr)
        if isinstance(value, CallableValue) and isinstance(value.node, FunctionNode + (ast.Lambda,)):
            return value.node
        return None

    def called_modules(self, func: ast.AST) -> list[tuple[ModuleRef, ast.Call]]:
        """The modules a function's body calls: ``model(x)``, ``self.encoder(x)``,
        ``m.forward(x)`` (``m`` a parameter: the site's argument)."""
        out = []
        for node in executed_nodes(func):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func
            if isinstance(callee, ast.Attribute) and callee.attr == "forward":
                callee = callee.value
            if not isinstance(callee, (ast.Name, ast.Attribute, ast.Subscript)):
                continue
            qual = self.ctx.model.qualify(callee)
            if qual is not None and (qual.startswith(("torch.", "builtins.")) or qual.startswith("<local>.")):
                continue
            ref = self.refs.ref(callee)
            if ref is not None and not ref.spread:
                out.append((ref, node))
        return out

    def _handles(self) -> list[tuple[object, list[tuple[ModuleRef, bool]], ast.AST, str, ast.AST | None, str]]:
        """(binding id of a compiled handle, trees, compiled by, how, compiled function, its name)."""
        model = self.ctx.model
        out = []
        for call in self._compile_calls():
            parent = getattr(call, "_hl_parent", None)
            if isinstance(parent, ast.Assign) and parent.value is call and len(parent.targets) == 1 \
                    and isinstance(parent.targets[0], ast.Name) and call.args:
                target = parent.targets[0]
                binding = next((b for b in model.scope_of(target).bindings.get(target.id, ()) if b.node is parent),
                               None)
                if binding is None:
                    continue
                func = self._function_node(call.args[0])
                if func is not None:
                    out.append((id(binding), [], call, "function", func, target.id))
                    continue
                ref = self.refs.ref(call.args[0])
                if ref is not None and not ref.spread:
                    out.append((id(binding), [(ref, self._root_fires(call.args[0]))], call, "module", None,
                                target.id))
        for func in model.functions:
            if not isinstance(func, FunctionNode):
                continue
            for dec in func.decorator_list:
                head = dec.func if isinstance(dec, ast.Call) else dec
                if model.qualify(head) in COMPILE_FUNCTIONS:
                    scope = model.scope_of(func)
                    binding = next((b for b in scope.bindings.get(func.name, ()) if b.node is func), None)
                    if binding is not None:
                        out.append((id(binding), [], dec, "function", func, func.name))
        return out

    def _root_fires(self, expr: ast.AST) -> bool:
        """torch.compile(module) runs the root's hooks outside dynamo, unless the
        root is a torch.nn class (docs/compile.md)."""
        value = self.ctx.inference.infer(expr)
        if isinstance(value, ModuleValue) and value.torch_class and value.local_class is None \
                and value.torch_class.startswith(_TORCH_CONTAINERS):
            return False
        return True

    def calls(self) -> list[Compiled]:
        model = self.ctx.model
        found: list[Compiled] = []
        handles = self._handles()
        by_binding = {h[0]: h for h in handles}
        names = {h[5] for h in handles}
        for name in names:
            for call in model.name_calls.get(name, ()):
                bindings = model.bindings_at(call.func)  # type: ignore[arg-type]
                for b in bindings:
                    handle = by_binding.get(id(b))
                    if handle is None:
                        continue
                    _key, trees, by, how, func, _name = handle
                    if func is not None:
                        trees = self._function_trees(func, call)
                    if trees:
                        found.append(Compiled(call, trees, by, how))
                    break
        found += self._in_place()
        found += self._through_parameters(handles)
        found += self._through_functions(found)
        found.sort(key=lambda c: _position(c.call))
        return found

    def _function_trees(self, func: ast.AST, site: ast.Call) -> list[tuple[ModuleRef, bool]]:
        """The trees a compiled function traces when called at ``site``: the
        modules its body calls; those named by a parameter are the site's arguments."""
        params = positional_params(func)
        out = []
        for ref, _call in self.called_modules(func):
            if isinstance(ref.root[0], int) and len(ref.root) == 1:
                # a parameter of the compiled function: the argument at the site
                arg = self._argument_for(func, params, ref, site)
                if arg is not None:
                    base = self.refs.ref(arg)
                    if base is not None:
                        tree = base.extend(ref.path)
                        if tree is not None:
                            out.append((tree, False))
                    continue
            out.append((ref, False))
        return out

    def _argument_for(self, func: ast.AST, params: list[str], ref: ModuleRef, site: ast.Call) -> ast.AST | None:
        """The argument ``site`` passes for the parameter ``ref`` is rooted in (None if not a parameter)."""
        scope = self.ctx.model.scopes.get(func)
        if scope is None:
            return None
        for name, bindings in scope.bindings.items():
            for b in bindings:
                if id(b) == ref.root[0] and b.kind == "param":
                    if name in params:
                        index = params.index(name)
                        if index < len(site.args) and not any(isinstance(a, ast.Starred)
                                                              for a in site.args[:index + 1]):
                            return site.args[index]
                    return next((k.value for k in site.keywords if k.arg == name), None)
        return None

    def _in_place(self) -> list[Compiled]:
        """``model.compile()``: the calls of ``model`` after it."""
        model = self.ctx.model
        out = []
        for compile_call in model.method_calls.get("compile", ()):
            receiver = compile_call.func.value  # type: ignore[attr-defined]
            if model.qualify(compile_call.func) in COMPILE_FUNCTIONS:
                continue
            ref = self.refs.ref(receiver)
            if ref is None or ref.spread:
                continue
            root_fires = self._root_fires(receiver)
            if isinstance(receiver, ast.Name):
                same_name = model.name_calls.get(receiver.id, [])
            elif isinstance(receiver, ast.Attribute):
                same_name = model.method_calls.get(receiver.attr, [])
            else:
                continue
            for calls in (same_name,):
                for call in calls:
                    callee = call.func
                    if isinstance(callee, ast.Attribute) and callee.attr == "compile":
                        continue
                    if self.refs.ref(callee) == ref and runs_after(compile_call, call) is not None \
                            and runs_after(compile_call, call).how == "after":
                        out.append(Compiled(call, [(ref, root_fires)], compile_call, "in place"))
        return out

    def _through_parameters(self, handles) -> list[Compiled]:
        """``train(cmodel, loader)`` where ``train`` calls its parameter: a compiled call at the site."""
        model = self.ctx.model
        by_binding = {h[0]: h for h in handles if h[3] == "module"}
        if not by_binding:
            return []
        out = []
        for func in model.functions:
            if not isinstance(func, FunctionNode):
                continue
            params = positional_params(func)
            called = {ref.root for ref, _c in self.called_modules(func)}
            scope = model.scopes.get(func)
            if scope is None:
                continue
            used = {p: b for p in params for b in scope.bindings.get(p, ()) if b.kind == "param" and (id(b),) in called}
            if not used:
                continue
            for site in self._sites_of(func):
                for p, param_binding in used.items():
                    arg = self._argument_for(func, params, ModuleRef((id(param_binding),), ()), site)
                    if not isinstance(arg, ast.Name):
                        continue
                    for b in model.bindings_at(arg):
                        handle = by_binding.get(id(b))
                        if handle is not None:
                            out.append(Compiled(site, handle[1], handle[2], handle[3], (site,)))
        return out

    def _sites_of(self, func: ast.AST) -> list[ast.Call]:
        model = self.ctx.model
        out = []
        for call in model.name_calls.get(getattr(func, "name", ""), ()):
            bindings = model.bindings_at(call.func)  # type: ignore[arg-type]
            if len(bindings) == 1 and bindings[0].node is func:
                out.append(call)
        return out

    def _through_functions(self, direct: list[Compiled]) -> list[Compiled]:
        """A call of a local function that makes a compiled call: the site is
        one too (one level), when the trees do not depend on its parameters."""
        out = []
        for compiled in direct:
            func = function_of(compiled.call)
            if not isinstance(func, FunctionNode) or compiled.through:
                continue
            for site in self._sites_of(func):
                trees = [(ref, fires) for ref, fires in compiled.trees if not self._param_rooted(ref, func)]
                if trees:
                    out.append(Compiled(site, trees, compiled.compiled_by, compiled.how, (site,)))
        return out

    def _param_rooted(self, ref: ModuleRef, func: ast.AST) -> bool:
        scope = self.ctx.model.scopes.get(func)
        if scope is None:
            return True
        return any(id(b) == ref.root[0] for bs in scope.bindings.values() for b in bs)


# ------------------------------------------------------------------ checkpointing

@dataclass
class Region:
    """Modules whose forward runs inside an activation-checkpointed region."""

    tree: ModuleRef
    call: ast.Call  # checkpoint(...), checkpoint_wrapper(...), checkpoint_sequential(...)
    how: str
    reentrant: bool | None  # None: not said (checkpoint_sequential's default is reentrant)
    # for checkpoint_sequential: the indexes of the children that are checkpointed
    indexes: frozenset[int] | None = None
    # the region root's children in the order its forward calls them, when the file shows it
    order: list[str] | None = field(default=None)
    # when the root's class is not known: the orders of every module class of the file
    candidates: list[list[str]] = field(default_factory=list)
    # checkpoint_sequential: the children per checkpointed segment
    segment: int | None = None

    @property
    def text(self) -> str:
        return src(self.call.func) + "(...)"


class CheckpointRegions:
    def __init__(self, ctx: "FileContext", refs: Refs | None = None, compiled: CompiledCalls | None = None):
        self.ctx = ctx
        self.refs = refs or Refs(ctx)
        self.compiled = compiled or CompiledCalls(ctx, self.refs)

    def _names(self) -> set[str]:
        """The names a call of the checkpoint APIs can have in this file (imports under another name too)."""
        names = {"checkpoint", "checkpoint_wrapper", "checkpoint_sequential"}
        wanted = CHECKPOINT_FUNCTIONS | CHECKPOINT_WRAPPERS | CHECKPOINT_SEQUENTIAL
        for name, bindings in self.ctx.model.module_scope.bindings.items():
            if any(b.kind == "import" and b.value in wanted for b in bindings):
                names.add(name)
        return names

    def regions(self) -> list[Region]:
        out = self._regions()
        if any(r.order is None for r in out):
            candidates = [order for info in self.ctx.model.classes.values()
                          if self.ctx.model.is_module_class(info) is not False
                          for order in [_forward_order(info)] if order]
            for region in out:
                if region.order is None:
                    region.candidates = candidates
        return out

    def _regions(self) -> list[Region]:
        model = self.ctx.model
        out: list[Region] = []
        names = self._names()
        candidates = [c for calls in (model.name_calls, model.method_calls) for name in names
                      for c in calls.get(name, ())]
        for call in candidates:
            qual = model.qualify(call.func)
            if qual in CHECKPOINT_FUNCTIONS and call.args:
                out += self._checkpoint(call)
            elif qual in CHECKPOINT_WRAPPERS and call.args:
                out += self._wrapper(call)
            elif qual in CHECKPOINT_SEQUENTIAL and call.args:
                region = self._sequential(call)
                if region is not None:
                    out.append(region)
        return out

    def _reentrant(self, call: ast.Call, default: bool | None) -> bool | None:
        for k in call.keywords:
            if k.arg == "use_reentrant":
                return k.value.value if isinstance(k.value, ast.Constant) and isinstance(k.value.value, bool) else None
            if k.arg == "checkpoint_impl":
                return src(k.value).endswith("REENTRANT") and not src(k.value).endswith("NO_REENTRANT")
        return default

    def _checkpoint(self, call: ast.Call) -> list[Region]:
        fn = call.args[0]
        reentrant = self._reentrant(call, None)
        func = self.compiled._function_node(fn)
        if func is None:
            ref = self.refs.ref(fn)
            if ref is None:
                return []
            return [Region(ref, call, "checkpoint", reentrant, order=self._order(fn, ref))]
        out = []
        for ref, inner in self.compiled.called_modules(func):
            out.append(Region(ref, call, "checkpoint", reentrant, order=self._order(inner.func, ref)))
        return out

    def _wrapper(self, call: ast.Call) -> list[Region]:
        arg = call.args[0]
        reentrant = self._reentrant(call, False)
        out = []
        ref = self.refs.ref(arg)
        if ref is not None:
            out.append(Region(ref, call, "checkpoint_wrapper", reentrant, order=self._order(arg, ref)))
        parent = getattr(call, "_hl_parent", None)
        if isinstance(parent, ast.Assign) and parent.value is call and len(parent.targets) == 1:
            target = self.refs.ref(parent.targets[0]) if not isinstance(parent.targets[0], ast.Name) else None
            if target is not None and target != ref:
                out.append(Region(target, call, "checkpoint_wrapper", reentrant, order=self._order(arg, target)))
        return out

    def _sequential(self, call: ast.Call) -> Region | None:
        seq = call.args[0]
        ref = self.refs.ref(seq)
        segments = call.args[1] if len(call.args) > 1 else \
            next((k.value for k in call.keywords if k.arg == "segments"), None)
        if ref is None or ref.spread or not (isinstance(segments, ast.Constant) and isinstance(segments.value, int)) \
                or segments.value < 1:
            return None
        children = self._sequential_children(seq)
        if children is None:
            return None
        size = children // segments.value
        indexes = frozenset(range(0, size * (segments.value - 1)))
        default = None
        reentrant = self._reentrant(call, default)
        if reentrant is None:
            reentrant = True  # torch 2.13 warns and checkpoints with use_reentrant=True
        return Region(ModuleRef(ref.root, ref.path, "items"), call, "checkpoint_sequential", reentrant, indexes,
                      segment=size)

    def _sequential_children(self, expr: ast.AST) -> int | None:
        """How many modules ``nn.Sequential(a, b, c)`` holds, when the file builds it in one call."""
        if isinstance(expr, ast.Name):
            bindings = self.ctx.model.bindings_at(expr)
            if len(bindings) != 1 or bindings[0].kind != "assign" or not isinstance(bindings[0].value, ast.Call):
                return None
            expr = bindings[0].value
        if isinstance(expr, ast.Call) and self.ctx.model.qualify(expr.func) == "torch.nn.Sequential" \
                and not expr.keywords and not any(isinstance(a, ast.Starred) for a in expr.args):
            return len(expr.args)
        return None

    def _order(self, expr: ast.AST, ref: ModuleRef) -> list[str] | None:
        """The first steps below the region's root in the order its forward calls
        them: ``[".attn", ".mlp"]`` for a local class, ``["[0]", "[1]"]`` for a
        ``nn.Sequential`` the file builds."""
        value = self.ctx.inference.infer(expr)
        if isinstance(value, ModuleValue) and value.local_class is not None:
            return _forward_order(value.local_class)
        if ref.spread == "items":
            return self._items_order(expr)
        count = self._sequential_children(expr)
        if count is not None:
            return [f"[{i}]" for i in range(count)]
        return None

    def _items_order(self, expr: ast.AST) -> list[str] | None:
        """A loop over ``self.blocks`` whose items are all of one local class."""
        model = self.ctx.model
        if not isinstance(expr, ast.Name):
            return None
        bindings = model.bindings_at(expr)
        if len(bindings) != 1 or bindings[0].kind != "for":
            return None
        iterable = bindings[0].value
        value = self.ctx.inference.infer(iterable) if isinstance(iterable, ast.AST) else None
        del value
        classes = self._item_classes(iterable)
        if classes is not None and len(classes) == 1:
            if isinstance(classes[0], int):
                return [f"[{i}]" for i in range(classes[0])]
            return _forward_order(classes[0])
        return None

    def _item_classes(self, iterable: object) -> list[ClassInfo | int] | None:
        """``self.blocks`` assigned ``nn.ModuleList(Block() for _ in ...)`` or ``nn.ModuleList([Block(), ...])``."""
        if not isinstance(iterable, ast.Attribute):
            return None
        owner = self.ctx.inference.infer(iterable.value)
        cls = owner.local_class if isinstance(owner, ModuleValue) else None
        if cls is None and isinstance(iterable.value, ast.Name):
            cls = self.ctx.model.enclosing_class(iterable)
        if cls is None:
            return None
        found: list[ClassInfo | int] = []
        for value, _scope, _node in cls.attribute(iterable.attr):
            if not isinstance(value, ast.Call) or not value.args:
                return None
            inner = value.args[0]
            elements = [inner.elt] if isinstance(inner, (ast.GeneratorExp, ast.ListComp)) else \
                list(inner.elts) if isinstance(inner, (ast.List, ast.Tuple)) else []
            for element in elements:
                if not isinstance(element, ast.Call):
                    return None
                count = self._sequential_children(element)
                if count is not None:  # `nn.Sequential(nn.Linear(...), nn.GELU())` items: their length
                    if count not in found:
                        found.append(count)  # type: ignore[arg-type]
                    continue
                info = self.ctx.model.class_for_expr(element.func)
                if info is None:
                    return None
                if info not in found:
                    found.append(info)
        return found or None


def _forward_order(cls: ClassInfo) -> list[str] | None:
    """The children a class's ``forward`` calls (``[".attn", ".mlp"]``), in the order their calls end."""
    forward = cls.method("forward")
    if forward is None:
        return None
    params = positional_params(forward)
    if not params:
        return None
    me = params[0]
    # the order in which the calls of `self.<child>(...)` finish (a call in another's arguments finishes
    # first), each child at its last call: the last one is the layer the recompute stops in
    positions: dict[str, tuple[int, int]] = {}
    for node in executed_nodes(forward):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == me:
            positions["." + node.func.attr] = max(positions.get("." + node.func.attr, (0, 0)), _end(node))
    if not positions:
        return None
    return sorted(positions, key=lambda step: positions[step])


def _end(node: ast.AST) -> tuple[int, int]:
    """Where a call finishes: the innermost call of nested calls finishes first."""
    return getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0


def runs_again(region: Region, how: str, view: ModuleRef, pre_hook: bool) -> bool:
    """Does a hook on this module of the region run again in the recompute?

    Reentrant checkpointing reruns the whole region.  Non-reentrant
    checkpointing (the default of ``checkpoint_wrapper``, and of
    ``checkpoint(..., use_reentrant=False)``) stops once the last saved tensor
    is rebuilt, inside the last layer's forward: forward hooks of the region's
    root and of its last layer run once, their forward pre-hooks (which run
    before the forward) twice.  Where the order of the region's layers is not
    visible, the answer is no."""
    if region.reentrant:
        return True
    if pre_hook:
        return True
    if region.segment:
        # each segment is a checkpoint of its own: its last layer's forward does not finish in the recompute
        child = first_step_below(view, ModuleRef(region.tree.root, region.tree.path))
        if child is None or len(view.path) != len(region.tree.path) + 1:
            return False
        try:
            index = int(child[1:-1])
        except ValueError:
            return False
        return index % region.segment != region.segment - 1
    if how == "root":
        return False
    step = first_step_below(view, region.tree)
    if step is None:
        return False
    if region.order is not None:
        return step in region.order and step != region.order[-1]
    # the root's class is not known: the module classes of the file whose forward calls this step
    # must all call something after it
    orders = [order for order in region.candidates if step in order]
    return bool(orders) and all(step != order[-1] for order in orders)


def runs_region(refs: Refs, call: ast.Call, region: Region) -> bool:
    """Does ``call`` run the region's forward: the checkpoint call itself, or a
    call of a module the region is part of?"""
    if call is region.call:
        return True
    callee = call.func
    if isinstance(callee, ast.Attribute) and callee.attr == "forward":
        callee = callee.value
    if not isinstance(callee, (ast.Name, ast.Attribute, ast.Subscript)):
        return False
    return any(relation(region.tree, view) is not None for view in refs.views(callee))


def receiver_views(ctx: "FileContext", refs: Refs, reg) -> list[tuple[ast.Call | None, ast.AST, list[ModuleRef]]]:
    """Where a registration's module comes from: (the call site that supplies
    it or None, the expression naming it there, its views).  A registration
    reached through a helper (``reg.via``) is seen at the helper's call site;
    one whose receiver is a parameter of the function it is in is also seen at
    each call of that function in this file (``with intervene(model.blocks[2]):``)."""
    if reg.via and reg.receiver_origin is not None:
        return [(reg.site_call, reg.receiver_origin, refs.views(reg.receiver_origin))]
    receiver = reg.receiver
    if receiver is None:
        return []
    out: list[tuple[ast.Call | None, ast.AST, list[ModuleRef]]] = [(None, receiver, refs.views(receiver))]
    found = _steps(receiver)
    if found is None or not isinstance(found[0], ast.Name) or not hasattr(found[0], "_hl_scope"):
        return out
    root, steps = found
    bindings = ctx.model.bindings_at(root)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return out
    func = bindings[0].scope.node
    if not isinstance(func, FunctionNode) or ctx.model.enclosing_class(func) is not None:
        return out
    params = positional_params(func)
    if root.id not in params:
        return out
    index = params.index(root.id)
    for call in ctx.model.name_calls.get(func.name, ()):
        site_bindings = ctx.model.bindings_at(call.func)  # type: ignore[arg-type]
        if len(site_bindings) != 1 or site_bindings[0].node is not func:
            continue
        if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
            arg = call.args[index]
        else:
            arg = next((k.value for k in call.keywords if k.arg == root.id), None)
        if arg is None:
            continue
        views = [v for v in (view.extend(steps) for view in refs.views(arg)) if v is not None]
        if views:
            out.append((call, arg, views))
    return out


def views_relation(views: list[ModuleRef], region: Region) -> tuple[str, ModuleRef] | None:
    for view in views:
        how = relation(view, region.tree)
        if how is None:
            continue
        if region.indexes is not None:
            step = first_step_below(view, ModuleRef(region.tree.root, region.tree.path))
            if step is None or not step.startswith("[") or step == ANY_INDEX:
                continue
            try:
                index = int(step[1:-1])
            except ValueError:
                continue
            if index not in region.indexes:
                continue
        return how, view
    return None


# ------------------------------------------------------------------ across files

# A registration a function makes on a module one of its parameters names, as the
# project summary records it (hooklint.static.callgraph): [parameter, steps below
# it, hook kind, changes the output, accumulates state, removal].  ``removal`` is
# "exit" for a class whose `__enter__` registers and `__exit__` removes (the
# fact is the constructor's), "yield" for a `@contextmanager` function that
# removes after its `yield`, "" otherwise.
HookFact = list


def hook_summary(model, inference) -> dict[str, list[HookFact]]:
    """Per function of the file (local qualified name), the module hooks it
    registers on what its parameters name: what a caller in another file needs
    to know to place those registrations at its own call."""
    from hooklint.static.callgraph import is_self_param, local_qualname
    from hooklint.static.hook_effects import accumulating_effects, changes_output
    from hooklint.static.hooks import METHOD_KINDS, HookIndex, HookKind

    if not any(model.method_calls.get(name) for name, kind in METHOD_KINDS.items() if kind.is_module):
        return {}
    out: dict[str, list[HookFact]] = {}
    for reg in HookIndex(model, inference).registrations:
        if not reg.kind.is_module or reg.is_global or reg.receiver is None:
            continue
        func = function_of(reg.call)
        if not isinstance(func, FunctionNode):
            continue
        found = _steps(reg.receiver)
        if found is None or not isinstance(found[0], ast.Name) or not hasattr(found[0], "_hl_scope"):
            continue
        root, steps = found
        source = _parameter_source(model, root, steps, func, is_self_param)
        if source is None:
            continue
        owner, param, steps = source
        removal = ""
        cls = model.enclosing_class(func)
        if owner is func and cls is not None and func.name == "__enter__":
            continue  # `__enter__` on its own parameters: not a shape callers use
        if cls is not None and func.name == "__enter__":
            exit_method = cls.method("__exit__")
            if exit_method is None or not _removes(exit_method):
                continue
            removal = "exit"
        elif owner is func and _is_contextmanager(model, func):
            yields = [n for n in executed_nodes(func) if isinstance(n, (ast.Yield, ast.YieldFrom))]
            removes = [n for n in executed_nodes(func) if _is_remove(n)]
            if not any(runs_after(y, r) is not None for y in yields for r in removes):
                continue
            removal = "yield"
        elif owner is not func and cls is not None and func.name not in ("__init__",) \
                and not _called_from(model, cls, func, "__init__"):
            continue  # a method that registers later, on demand: not at the constructor's call
        name = local_qualname(owner)
        if name is None:
            continue
        changed = None
        if reg.kind is HookKind.FORWARD:
            changed = reg.param("output")
        elif reg.kind is HookKind.FORWARD_PRE:
            changed = reg.param("args") if reg.with_kwargs else reg.param("input")
        hook = reg.hook.node if reg.hook is not None else None
        changes = hook is not None and reg.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) \
            and changes_output(hook, changed) is not None
        accumulates = hook is not None and bool(accumulating_effects(hook))
        out.setdefault(name, []).append([param, list(steps), reg.kind.value, changes, accumulates, removal])
    return out


def _parameter_source(model, root: ast.Name, steps: tuple, func: ast.AST, is_self_param,
                      depth: int = 0) -> tuple[ast.AST, str, tuple] | None:
    """(the function whose parameter it is, the parameter, steps from it) for a
    receiver rooted in a parameter of ``func``, in a loop over one (``for layer
    in target_layers``), or in ``self.<attr>`` that ``__init__`` set from one of
    its parameters (then the function is ``__init__``)."""
    bindings = model.bindings_at(root)
    if len(bindings) != 1 or depth > 3:
        return None
    b = bindings[0]
    if b.kind == "param" and isinstance(b.value, ast.arg):
        if b.scope.node is not func:
            return None
        if not is_self_param(model, b.value):
            return func, root.id, steps
        cls = model.enclosing_class(func)
        if cls is None or not steps or not steps[0].startswith("."):
            return None
        found = _self_attribute_source(model, cls, steps[0][1:])
        return None if found is None else (found[0], found[1], steps[1:])
    if b.kind == "for" and not b.path and isinstance(b.value, ast.AST):
        found = _steps(b.value)
        if found is None or not isinstance(found[0], ast.Name) or not hasattr(found[0], "_hl_scope"):
            return None
        return _parameter_source(model, found[0], found[1] + (ANY_INDEX,) + steps, func, is_self_param, depth + 1)
    return None


def _self_attribute_source(model, cls, attr: str) -> tuple[ast.AST, str] | None:
    init = cls.method("__init__")
    if init is None:
        return None
    params = positional_params(init)
    for node in executed_nodes(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Attribute) and target.attr == attr and isinstance(target.value, ast.Name) \
                    and params and target.value.id == params[0] and isinstance(node.value, ast.Name) \
                    and node.value.id in params[1:] + [a.arg for a in init.args.kwonlyargs]:
                return init, node.value.id
    return None


def _removes(func: ast.AST) -> bool:
    return any(_is_remove(n) for n in executed_nodes(func))


def _is_remove(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "remove" \
        and not node.args


def _is_contextmanager(model, func: ast.AST) -> bool:
    return any(model.qualify(d) in ("contextlib.contextmanager", "contextlib.asynccontextmanager")
               for d in getattr(func, "decorator_list", ()))


def _called_from(model, cls, func: ast.AST, caller: str) -> bool:
    method = cls.method(caller)
    if method is None:
        return False
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == func.name
               and isinstance(n.func.value, ast.Name) for n in executed_nodes(method))


@dataclass
class Foreign:
    """A registration a function of another file makes on what this file's call gives it."""

    site: ast.Call  # the call in this file
    argument: ast.AST  # the argument the module comes from
    views: list[ModuleRef]  # the hooked module, as this file names it
    kind: str  # HookKind value
    changes: bool
    accumulates: bool
    removal: str
    callee: str


_UNRESOLVED = ("", 0, None)  # a callee not worked out yet (its name nests too deeply to resolve)


def foreign_registrations(ctx: "FileContext", refs: Refs, relevant) -> list[Foreign]:
    """Registrations made by functions of other files at this file's calls, for
    the calls with an argument ``relevant(views)`` accepts (only those are asked
    about: each question is recorded for the project pass)."""
    out: list[Foreign] = []
    own = ctx.module + "."
    model = ctx.model
    summarizer = ctx.summarizer
    for calls in (model.name_calls, model.method_calls):
        for group in calls.values():
            for call in group:
                # the callee first: its name is cheap (and the summary needs it anyway) and rules out nearly
                # every call (torch's, this file's); the views of the arguments infer values, and were most of
                # what HKL701-HKL703 cost, computed for every call of every file they check
                try:
                    found = summarizer.callee(call)
                except RecursionError:
                    found = _UNRESOLVED  # asked again below, where the arguments say it matters, as before
                if found is None or (found is not _UNRESOLVED and found[0].startswith((own, "super:"))):
                    continue
                arguments = _argument_views(refs, call)
                if not any(relevant(views) for _key, _arg, views, _items in arguments):
                    continue
                if found is _UNRESOLVED:
                    found = summarizer.callee(call)
                    if found is None or found[0].startswith((own, "super:")):
                        continue
                answer = ctx.project.hooks_of(found[0])
                if not answer:
                    continue
                bound, positional, facts = answer
                params = positional[bound:]
                for param, steps, kind, changes, accumulates, removal in facts:
                    for key, arg, views, items in arguments:
                        if key != param and not (isinstance(key, int) and key < len(params) and params[key] == param):
                            continue
                        steps = tuple(steps)
                        named = arg
                        if items is not None:  # `[model.layer4]` given where the function loops over its items
                            if not steps or steps[0] != ANY_INDEX:
                                continue
                            steps, views, named = steps[1:], items, arg.elts[0]  # type: ignore[attr-defined]
                        extended = [v for v in (view.extend(steps) for view in views) if v is not None]
                        if extended:
                            out.append(Foreign(call, named, extended, kind, changes, accumulates, removal,
                                               src(call.func)))
    return out


def _argument_views(refs: Refs, call: ast.Call) -> list[tuple[object, ast.AST, list[ModuleRef], list | None]]:
    """(position or keyword, argument, its views, the views of its items when it is a list literal)."""
    out: list[tuple[object, ast.AST, list[ModuleRef], list | None]] = []
    entries: list[tuple[object, ast.AST]] = []
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        entries.append((i, arg))
    entries += [(k.arg, k.value) for k in call.keywords if k.arg is not None]
    for key, arg in entries:
        if isinstance(arg, (ast.List, ast.Tuple)) and len(arg.elts) == 1:
            items = refs.views(arg.elts[0])
            if items:
                out.append((key, arg, items, items))
            continue
        views = refs.views(arg)
        if views:
            out.append((key, arg, views, None))
    return out
