"""A small semantic model of one Python file: scopes, bindings, imports, classes.

Nothing here imports torch or executes user code.  The model answers the
questions the rules ask: "what does this name refer to", "is this class an
``nn.Module``", "what was assigned to ``self.fc1``", "which calls of method
``remove`` are in this file".  It is deliberately modest: where the answer is
not clear from the file, it says "unknown" and the rules stay quiet.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator

BUILTIN_NAMES = frozenset(dir(builtins))

FunctionNode = (ast.FunctionDef, ast.AsyncFunctionDef)
ScopeNode = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(eq=False)
class Binding:
    """One place where a name gets a value.

    ``value`` depends on ``kind``: the qualified name (str) for imports, the
    assigned expression for assignments, the iterable for ``for`` targets, the
    ``ast.arg`` for parameters, the def/class node for definitions.  ``path``
    is the tuple-unpacking index path (``for i, m in ...`` gives ``m`` path (1,)).
    """

    name: str
    kind: str
    node: ast.AST
    value: object
    scope: "Scope"
    path: tuple[int, ...] = ()

    @property
    def lineno(self) -> int:
        return getattr(self.node, "lineno", 0)


@dataclass(eq=False)
class Scope:
    node: ast.AST
    kind: str  # module | class | function | lambda | comprehension
    parent: "Scope | None"
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    globals_: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)

    def add(self, binding: Binding) -> None:
        self.bindings.setdefault(binding.name, []).append(binding)

    @property
    def function(self) -> ast.AST | None:
        return self.node if self.kind in ("function", "lambda") else None


@dataclass(eq=False)
class ClassInfo:
    name: str
    node: ast.ClassDef
    scope: Scope  # the scope the class statement is in
    bases: list[str | None]  # qualified names; None where a base is not resolvable
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    # self.<attr> = <expr> in any method: attr -> [(expr, method scope, assign node)]
    attributes: dict[str, list[tuple[ast.expr, Scope, ast.AST]]] = field(default_factory=dict)
    local_bases: list["ClassInfo"] = field(default_factory=list)
    _is_module: bool | None = None
    _resolving: bool = False

    def method(self, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """A method defined here or in a local base class (MRO, depth first)."""
        if name in self.methods:
            return self.methods[name]
        for base in self.local_bases:
            found = base.method(name)
            if found is not None:
                return found
        return None

    def owner_of(self, name: str) -> "ClassInfo | None":
        if name in self.methods:
            return self
        for base in self.local_bases:
            found = base.owner_of(name)
            if found is not None:
                return found
        return None

    def attribute(self, name: str) -> list[tuple[ast.expr, Scope, ast.AST]]:
        if name in self.attributes:
            return self.attributes[name]
        for base in self.local_bases:
            found = base.attribute(name)
            if found:
                return found
        return []


# Deep-learning frameworks other than torch whose layers have methods named
# as torch's module hooks (`register_forward_hook` on a Gluon Block, a
# MindSpore Cell, a OneFlow or Jittor Module; Paddle's pre-hook).
FOREIGN_FRAMEWORKS = frozenset({"mxnet", "paddle", "mindspore", "oneflow", "jittor", "megengine"})
# torch.nn names that look like classes but are not modules
_NN_NON_MODULES = frozenset(
    {"Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer", "UninitializedTensorMixin"}
)
# Module base classes from the wider ecosystem, by qualified name.
_KNOWN_MODULE_BASES = frozenset(
    {
        "pytorch_lightning.LightningModule",
        "pytorch_lightning.core.LightningModule",
        "pytorch_lightning.core.module.LightningModule",
        "lightning.LightningModule",
        "lightning.pytorch.LightningModule",
        "lightning.pytorch.core.module.LightningModule",
        "transformers.PreTrainedModel",
        "transformers.modeling_utils.PreTrainedModel",
    }
)


def class_base_expr(expr: ast.AST) -> ast.AST:
    """The class a base expression names: ``Base[T]`` (a parametrized
    generic, ``Operator[Tensor, Tensor]``) puts its origin class ``Base`` in
    the MRO (``__mro_entries__``), so it is ``Base`` as a base."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    return expr


def is_torch_module_class(qualname: str | None) -> bool:
    """True for ``torch.nn.Module``, ``torch.nn.Linear``, ``torch.nn.modules.conv.Conv2d`` ..."""
    if not qualname:
        return False
    if qualname in _KNOWN_MODULE_BASES:
        return True
    if not qualname.startswith("torch.nn."):
        return False
    last = qualname.rsplit(".", 1)[-1]
    if not last[:1].isupper() or last in _NN_NON_MODULES:
        return False
    middle = qualname[len("torch.nn.") : -len(last)].rstrip(".")
    # torch.nn.X, torch.nn.modules[.sub].X, torch.nn.parallel[.sub].X, torch.nn.qat..., not torch.nn.utils.X
    return middle == "" or middle.split(".")[0] in ("modules", "parallel", "quantized", "qat", "intrinsic")


def torch_module_class_name(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


_AST = ast.AST
# Node types the builder only links (parent, scope) and descends into.
_EXIT_NODES = frozenset({ast.Return, ast.Yield, ast.YieldFrom, ast.Raise})
_PLAIN_NODES = frozenset({
    ast.Constant, ast.Attribute, ast.BinOp, ast.Compare, ast.Subscript, ast.Expr, ast.If, ast.Return,
    ast.keyword, ast.Tuple, ast.List, ast.Dict, ast.UnaryOp, ast.BoolOp, ast.Slice, ast.JoinedStr,
    ast.FormattedValue, ast.Starred, ast.Set, ast.IfExp, ast.alias, ast.Raise, ast.Assert, ast.Pass,
    ast.Break, ast.Continue, ast.Try, ast.While, ast.Await, ast.Yield, ast.YieldFrom, ast.Delete,
})


# Fields that never hold a node in any node type (names, flags, the shared
# Load/Store/Del `ctx`): skipping them made building the model 20% faster.
_LEAF_FIELDS = frozenset({"ctx", "id", "attr", "arg", "asname", "module", "level", "kind", "conversion",
                          "is_async", "simple", "type_comment"})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
_REVERSED_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}  # the same, last first (the build's stack)


def short_source(node: ast.AST, width: int = 60, odd: str = "<expr>") -> str:
    """The node's source for a message, cut to ``width`` characters (``odd``
    when the tree cannot be unparsed)."""
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - unparse of odd trees must not crash the linter
        return odd
    return text if len(text) <= width else text[:width - 3] + "..."


_BLOCK_FIELDS = ("body", "orelse", "finalbody")


def _blocks_of(parent: ast.AST) -> list[tuple[object, list]]:
    """(key, statement list) of every block ``parent`` holds directly: its
    body, ``else`` and ``finally``, and its ``except`` handlers' bodies."""
    out: list[tuple[object, list]] = [(f, getattr(parent, f, None)) for f in _BLOCK_FIELDS]
    out += [(("handler", n), h.body) for n, h in enumerate(getattr(parent, "handlers", ()) or ())]
    return [(key, block) for key, block in out if isinstance(block, list)]


def block_position(stmt: ast.stmt, parent: ast.AST) -> tuple[list[ast.stmt], int] | None:
    """The block of ``parent`` that holds ``stmt``, and its index there.

    Every statement of ``parent``'s blocks learns its position the first time
    one of them is asked (``_hl_block``: the block's key and the index, no
    reference back to the list, so no new reference cycle for the collector):
    asking for each statement of a long block was quadratic (a module of
    5,000 registrations)."""
    if getattr(stmt, "_hl_parent", None) is not parent:
        return None
    pos = getattr(stmt, "_hl_block", None)
    if pos is None:
        for key, block in _blocks_of(parent):
            for i, item in enumerate(block):
                item._hl_block = (key, i)  # type: ignore[attr-defined]
        pos = getattr(stmt, "_hl_block", None)
        if pos is None:
            return None
    key, index = pos
    block = dict(_blocks_of(parent)).get(key)
    if block is None or index >= len(block) or block[index] is not stmt:
        return None
    return block, index


def statements_before(stmt: ast.stmt, parent: ast.AST) -> list[ast.stmt]:
    """The statements before ``stmt`` in the block of ``parent`` that holds it
    (a body, an ``else``, a ``finally`` or an ``except`` handler): what has run
    by the time it runs.  Empty when no block of ``parent`` holds it."""
    pos = block_position(stmt, parent)
    return [] if pos is None else pos[0][:pos[1]]


_EXIT_STATEMENTS = (ast.Continue, ast.Break, ast.Return, ast.Raise)


def earlier_exit_guards(stmt: ast.stmt, parent: ast.AST) -> list[ast.If]:
    """The ``if`` statements before ``stmt`` in its block whose body ends by
    leaving (return, raise, break, continue): what a statement after them
    knows about their tests.  Found once per block (``_hl_guards``)."""
    pos = block_position(stmt, parent)
    if pos is None:
        return []
    block, index = pos
    key = stmt._hl_block[0]  # type: ignore[attr-defined]
    guards = getattr(parent, "_hl_guards", None)
    if guards is None:
        guards = {}
        parent._hl_guards = guards  # type: ignore[attr-defined]
    if key not in guards:
        guards[key] = [i for i, item in enumerate(block) if isinstance(item, ast.If) and item.body
                       and isinstance(item.body[-1], _EXIT_STATEMENTS)]
    return [block[i] for i in guards[key] if i < index]


@lru_cache(maxsize=1)
def _shared_nodes() -> tuple[ast.AST, ...]:
    """The operator and context nodes CPython shares between all the trees it makes."""
    # (compile, not ast.parse: this is no file of the user's; tests count the files parsed)
    tree = compile("a + b - c * d @ e / f % g ** h << i >> j | k & l ^ m // n\n"
                   "not a; -a; +a; ~a\na and b or c\n"
                   "a == b != c < d <= e > f >= g is h is not i in j not in k\ndel a\nb = a\n",
                   "<hooklint: shared nodes>", "exec", ast.PyCF_ONLY_AST)
    kinds = (ast.operator, ast.boolop, ast.unaryop, ast.cmpop, ast.expr_context)
    return tuple({id(n): n for n in ast.walk(tree) if isinstance(n, kinds)}.values())


def _child_fields(kind: type) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = tuple(f for f in kind._fields if f not in _LEAF_FIELDS)
    return fields


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """Children in field order, without the shared Load/Store/Del singletons."""
    kind = type(node)
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _child_fields(kind)
    out: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if type(value) is list:
            out += [item for item in value if isinstance(item, _AST)]
        elif isinstance(value, _AST):
            out.append(value)
    return out


class SemanticModel:
    """Built once per file; every rule shares it."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.module_scope = Scope(tree, "module", None)
        self.scopes: dict[ast.AST, Scope] = {tree: self.module_scope}
        self.classes: dict[ast.ClassDef, ClassInfo] = {}
        # method name -> calls `<expr>.<name>(...)`, in source order
        self.method_calls: dict[str, list[ast.Call]] = {}
        self.name_calls: dict[str, list[ast.Call]] = {}  # `name(...)`
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda] = []
        # `return`, `yield`, `yield from` and `raise`, in the order visited (summaries look them up by function)
        self.exits: list[ast.AST] = []
        self._visited: list[ast.AST] = []
        self._imports: list[ast.Import | ast.ImportFrom] = []  # every import statement, wherever it is
        # every attribute name the file reads or writes (`x.<name>`): "does the file name `_forward_hooks`?"
        # answered without a walk of every node
        self.attribute_names: set[str] = set()
        self._build()
        self._link_classes()

    @property
    def imported_packages(self) -> frozenset[str]:
        """The top-level packages the file imports (absolute imports only),
        wherever the import statement is."""
        found = getattr(self, "_imported_packages", None)
        if found is None:
            names: set[str] = set()
            for node in self._imports if self._visited else ast.walk(self.tree):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names.add(node.module.split(".")[0])
            found = self._imported_packages = frozenset(names)
        return found

    def foreign_framework(self) -> str | None:
        """The deep-learning framework the file's modules belong to when it is
        demonstrably not torch: the file imports one whose layers have hook
        methods of torch's names (MXNet Gluon's ``Block.register_forward_hook``,
        Paddle's ``Layer.register_forward_pre_hook``, MindSpore's ``Cell``...)
        and never imports torch.  None when the file imports torch, or none of
        them (a star import or a helper taking a model: it may be torch)."""
        imported = self.imported_packages
        if "torch" in imported:
            return None
        for package in sorted(imported & FOREIGN_FRAMEWORKS):
            return package
        return None

    def release(self) -> None:
        """Break the node <-> parent/scope reference cycles once rules are done.

        Without this every analysed tree is cyclic garbage that only the cycle
        collector can free, and collecting it cost more than parsing (measured
        with bench/static_throughput.py: 5x ast.parse with, 1.8x without)."""
        for node in self._visited:
            node._hl_parent = None  # type: ignore[attr-defined]
            node._hl_scope = None  # type: ignore[attr-defined]
        self._visited = []
        self._imports = []
        self.exits = []
        for scope in self.scopes.values():  # Binding.scope <-> Scope.bindings
            scope.bindings = {}
        self.tree.__dict__.pop("_hl_walk", None)  # hooklint.static.tree_walk: the tree <-> its node list

    @staticmethod
    def release_shared() -> None:
        """Detach the nodes every tree shares from the last tree analysed.

        CPython gives each tree the same operator objects (one ``ast.Add()``
        for every ``+`` of every file parsed, one ``ast.Eq()``...), and the
        model links them to a parent and a scope like any node: they kept the
        last analysed tree, and all that was computed about it, reachable
        until the next file replaced it.  (Collected in the youngest
        generation after each file, that tree survived, aged into the oldest
        one and made its collections expensive.)  :meth:`release` does it too."""
        for node in _shared_nodes():
            node.__dict__.pop("_hl_parent", None)
            node.__dict__.pop("_hl_scope", None)

    # ------------------------------------------------------------------ build
    def _build(self) -> None:
        # Iterative walk: deep expressions must not hit Python's recursion limit.
        stack: list[tuple[ast.AST, ast.AST | None, Scope]] = [(self.tree, None, self.module_scope)]
        method_calls = self.method_calls
        name_calls = self.name_calls
        visited = self._visited
        exits = self.exits
        reversed_fields = _REVERSED_CHILD_FIELDS
        attribute_names = self.attribute_names
        attribute = ast.Attribute
        while stack:
            node, parent, scope = stack.pop()
            node._hl_parent = parent  # type: ignore[attr-defined]
            node._hl_scope = scope  # type: ignore[attr-defined]
            visited.append(node)
            child_scope = scope
            kind = type(node)
            if kind in _PLAIN_NODES:
                if kind is attribute:
                    attribute_names.add(node.attr)  # type: ignore[attr-defined]
                elif kind in _EXIT_NODES:
                    exits.append(node)
            elif isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute):
                    method_calls.setdefault(func.attr, []).append(node)
                elif isinstance(func, ast.Name):
                    name_calls.setdefault(func.id, []).append(node)
            elif kind is ast.Name:
                if isinstance(node.ctx, ast.Store):
                    self._bind_target(node, scope)
            elif isinstance(node, FunctionNode):
                self._bind(scope, node.name, "def", node, node)
                child_scope = self._new_scope(node, "function", scope)
                self.functions.append(node)
                self._bind_params(node.args, child_scope)
                # Decorators, defaults and annotations evaluate in the outer scope.
                for sub in node.decorator_list + _arg_defaults(node.args):
                    stack.append((sub, node, scope))
                for sub in reversed(node.body):
                    stack.append((sub, node, child_scope))
                if node.returns is not None:
                    stack.append((node.returns, node, scope))
                for a in _all_args(node.args):
                    a._hl_parent = node  # type: ignore[attr-defined]
                    a._hl_scope = child_scope  # type: ignore[attr-defined]
                    visited.append(a)
                    if a.annotation is not None:
                        stack.append((a.annotation, a, scope))
                continue
            elif isinstance(node, ast.Lambda):
                child_scope = self._new_scope(node, "lambda", scope)
                self.functions.append(node)
                self._bind_params(node.args, child_scope)
                for sub in _arg_defaults(node.args):
                    stack.append((sub, node, scope))
                for a in _all_args(node.args):
                    a._hl_parent = node  # type: ignore[attr-defined]
                    a._hl_scope = child_scope  # type: ignore[attr-defined]
                    visited.append(a)
                stack.append((node.body, node, child_scope))
                continue
            elif isinstance(node, ast.ClassDef):
                self._bind(scope, node.name, "class", node, node)
                child_scope = self._new_scope(node, "class", scope)
                info = ClassInfo(node.name, node, scope, [])
                self.classes[node] = info
                for sub in node.bases + [k.value for k in node.keywords] + node.decorator_list:
                    stack.append((sub, node, scope))
                for sub in reversed(node.body):
                    stack.append((sub, node, child_scope))
                continue
            elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                child_scope = self._new_scope(node, "comprehension", scope)
                gens = node.generators
                # The first iterable evaluates in the enclosing scope.
                stack.append((gens[0].iter, node, scope))
                for gen in gens:
                    gen._hl_parent = node  # type: ignore[attr-defined]
                    gen._hl_scope = child_scope  # type: ignore[attr-defined]
                    visited.append(gen)
                    self._bind_unpack(gen.target, "for", gen.iter, child_scope, gen)
                    stack.append((gen.target, gen, child_scope))
                    if gen is not gens[0]:
                        stack.append((gen.iter, gen, child_scope))
                    for cond in gen.ifs:
                        stack.append((cond, gen, child_scope))
                if isinstance(node, ast.DictComp):
                    stack.append((node.value, node, child_scope))
                    stack.append((node.key, node, child_scope))
                else:
                    stack.append((node.elt, node, child_scope))
                continue
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self._imports.append(node)
                self._bind_import(node, scope)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                self._bind_assign(node, scope)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                self._bind_unpack(node.target, "for", node.iter, scope, node)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        self._bind_unpack(item.optional_vars, "with", item.context_expr, scope, node)
            elif isinstance(node, ast.Global):
                scope.globals_.update(node.names)
            elif isinstance(node, ast.Nonlocal):
                scope.nonlocals.update(node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self._bind(scope, node.name, "except", node, node.type)
            # child_nodes(node), pushed last child first (inlined: 1.8 million calls over the corpus)
            fields = reversed_fields.get(kind)
            if fields is None:
                fields = reversed_fields[kind] = tuple(reversed(_child_fields(kind)))
            for name in fields:
                value = getattr(node, name, None)
                if type(value) is list:
                    if value:
                        stack += [(item, node, scope) for item in reversed(value) if isinstance(item, _AST)]
                elif isinstance(value, _AST):
                    stack.append((value, node, scope))

    def _new_scope(self, node: ast.AST, kind: str, parent: Scope) -> Scope:
        scope = Scope(node, kind, parent)
        self.scopes[node] = scope
        return scope

    def _bind(self, scope: Scope, name: str, kind: str, node: ast.AST, value: object,
              path: tuple[int, ...] = ()) -> None:
        target = scope
        if name in scope.globals_:
            target = self.module_scope
        target.add(Binding(name, kind, node, value, target, path))

    def _bind_params(self, args: ast.arguments, scope: Scope) -> None:
        for a in _all_args(args):
            self._bind(scope, a.arg, "param", a, a)

    def _bind_import(self, node: ast.Import | ast.ImportFrom, scope: Scope) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self._bind(scope, alias.asname, "import", node, alias.name)
                else:
                    top = alias.name.split(".")[0]
                    self._bind(scope, top, "import", node, top)
        else:
            if node.level:  # relative import: a name from this package, never torch
                base = "." * node.level + (node.module or "")
            else:
                base = node.module or ""
            for alias in node.names:
                if alias.name == "*":
                    continue
                self._bind(scope, alias.asname or alias.name, "import", node, f"{base}.{alias.name}")

    def _bind_assign(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind_unpack(target, "assign", node.value, scope, node)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self._bind_unpack(node.target, "assign", node.value, scope, node)
        elif isinstance(node, ast.AugAssign):
            self._bind_unpack(node.target, "augassign", node, scope, node)
        elif isinstance(node, ast.NamedExpr):
            # the walrus binds in the nearest enclosing non-comprehension scope
            target_scope = scope
            while target_scope.kind == "comprehension" and target_scope.parent is not None:
                target_scope = target_scope.parent
            self._bind_unpack(node.target, "assign", node.value, target_scope, node)
        # self.attr = value inside a method: record on the class
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            self._record_self_attr(target, value, scope, node)

    def _record_self_attr(self, target: ast.expr, value: ast.expr | None, scope: Scope, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts):
                    self._record_self_attr(t, v, scope, node)
            return
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)) or value is None:
            return
        if scope.kind != "function":
            return
        func = scope.node
        if not func.args.args or func.args.args[0].arg != target.value.id:  # type: ignore[attr-defined]
            return
        cls_scope = scope.parent
        if cls_scope is None or cls_scope.kind != "class":
            return
        info = self.classes.get(cls_scope.node)  # type: ignore[arg-type]
        if info is not None:
            info.attributes.setdefault(target.attr, []).append((value, scope, node))

    def _bind_unpack(self, target: ast.expr, kind: str, value: object, scope: Scope, node: ast.AST,
                     path: tuple[int, ...] = ()) -> None:
        if isinstance(target, ast.Name):
            self._bind(scope, target.id, kind, node, value, path)
            target._hl_bound = True  # type: ignore[attr-defined]
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred):
                    self._bind_unpack(elt.value, kind, None, scope, node, path + (-1,))
                else:
                    self._bind_unpack(elt, kind, value, scope, node, path + (i,))
        elif isinstance(target, ast.Starred):
            self._bind_unpack(target.value, kind, None, scope, node, path + (-1,))

    def _bind_target(self, node: ast.Name, scope: Scope) -> None:
        # Store contexts not reached through an assignment statement (del, match captures)
        if getattr(node, "_hl_bound", False):
            return
        parent = getattr(node, "_hl_parent", None)
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor,
                               ast.With, ast.AsyncWith, ast.NamedExpr, ast.comprehension,
                               ast.Tuple, ast.List, ast.Starred, ast.withitem)):
            return
        self._bind(scope, node.id, "other", node, None)

    def _link_classes(self) -> None:
        for info in self.classes.values():
            for stmt in info.node.body:
                if isinstance(stmt, FunctionNode):
                    info.methods[stmt.name] = stmt
            for base in map(class_base_expr, info.node.bases):
                local = self.class_for_expr(base)
                info.bases.append(self.qualify(base) if local is None else None)
                if local is not None and local is not info:
                    info.local_bases.append(local)

    # ---------------------------------------------------------------- queries
    @staticmethod
    def scope_of(node: ast.AST) -> Scope:
        return node._hl_scope  # type: ignore[attr-defined]

    @staticmethod
    def parent(node: ast.AST) -> ast.AST | None:
        return getattr(node, "_hl_parent", None)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        cur = self.parent(node)
        while cur is not None:
            yield cur
            cur = self.parent(cur)

    def enclosing_function(self, node: ast.AST) -> ast.AST | None:
        for anc in self.ancestors(node):
            if isinstance(anc, FunctionNode + (ast.Lambda,)):
                return anc
        return None

    def enclosing_class(self, node: ast.AST) -> ClassInfo | None:
        for anc in self.ancestors(node):
            if isinstance(anc, ast.ClassDef):
                return self.classes.get(anc)
        return None

    def lookup(self, name: str, scope: Scope) -> list[Binding]:
        """Bindings a name can refer to from ``scope`` (LEGB, skipping class scopes)."""
        if name in scope.globals_:
            return self.module_scope.bindings.get(name, [])
        cur: Scope | None = scope
        first = True
        while cur is not None:
            if first or cur.kind != "class":
                found = cur.bindings.get(name)
                if found:
                    return found
            first = False
            cur = cur.parent
        return []

    def bindings_at(self, name_node: ast.Name) -> list[Binding]:
        """The bindings that can reach a use of a name.

        Within the name's own scope, the last binding textually before the use
        wins (straight-line code, which is what hooks scripts mostly are);
        otherwise all bindings of the defining scope are candidates.
        """
        scope = self.scope_of(name_node)
        found = self.lookup(name_node.id, scope)
        if not found:
            return []
        if len(found) == 1:
            # the one binding, whatever the line (the rules below pick it, or fall back to every binding): most
            # names, asked about for every call of every file by the summaries
            return found if found[0].scope is not scope or scope.kind == "class" else [found[0]]
        if found[0].scope is scope and scope.kind != "class":
            line = name_node.lineno
            before = [b for b in found if b.lineno and b.lineno <= line and b.kind != "param"
                      and not _inside_own_assignment(name_node, b)]
            params = [b for b in found if b.kind == "param"]
            if before:
                return [before[-1]]
            if params:
                return params
        return found

    def qualify(self, expr: ast.AST, _seen: frozenset[int] = frozenset()) -> str | None:
        """Dotted qualified name of an expression made of names and attributes.

        ``tnn.Linear`` with ``import torch.nn as tnn`` gives ``torch.nn.Linear``;
        a builtin gives ``builtins.<name>``; a local definition gives its own name
        prefixed with ``<local>.``.  Unknown gives None.  ``_seen`` holds the
        alias assignments already followed: `global` rebinding can make them
        cycle (``hooks = HOOKS`` in a function that also does ``HOOKS = hooks``).
        """
        parts: list[str] = []
        cur = expr
        while isinstance(cur, ast.Attribute):
            parts.append(cur.attr)
            cur = cur.value
        if not isinstance(cur, ast.Name):
            return None
        bindings = self.bindings_at(cur) if hasattr(cur, "_hl_scope") else []
        if not bindings:
            head = f"builtins.{cur.id}" if cur.id in BUILTIN_NAMES else None
        else:
            b = bindings[-1]
            if b.kind == "import":
                head = b.value  # type: ignore[assignment]
            elif b.kind in ("def", "class"):
                head = f"<local>.{cur.id}"
            elif b.kind == "assign" and isinstance(b.value, (ast.Name, ast.Attribute)) and b.value is not cur \
                    and not b.path and id(b.node) not in _seen:
                head = self.qualify(b.value, _seen | {id(b.node)})  # alias: Module = nn.Module
            else:
                head = None
        if head is None:
            return None
        return ".".join([head] + parts[::-1])

    def class_for_expr(self, expr: ast.AST, _seen: frozenset[int] = frozenset()) -> ClassInfo | None:
        """The local class an expression names, if any (``MyNet``, ``self.Block``...;
        ``Block[T]``, a parametrized generic of it, names it too)."""
        expr = class_base_expr(expr)
        if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
            for b in reversed(self.bindings_at(expr)):
                if b.kind == "class":
                    return self.classes.get(b.node)  # type: ignore[arg-type]
                if b.kind == "assign" and isinstance(b.value, ast.Name) and not b.path and b.value is not expr \
                        and id(b.node) not in _seen:
                    return self.class_for_expr(b.value, _seen | {id(b.node)})
                break
        return None

    def is_module_class(self, info: ClassInfo) -> bool | None:
        """True if the class is an ``nn.Module`` subclass, False if certainly not,
        None if a base comes from elsewhere and cannot be seen."""
        if info._is_module is not None:
            return info._is_module
        if info._resolving:
            return None
        info._resolving = True
        result: bool | None = False
        for base_expr, qual in zip(info.node.bases, info.bases):
            local = self.class_for_expr(base_expr)
            if local is not None:
                sub = self.is_module_class(local)
                if sub:
                    result = True
                    break
                if sub is None:
                    result = None
            elif is_torch_module_class(qual):
                result = True
                break
            elif qual is None or not (qual.startswith("builtins.") or qual in ("typing.Generic", "abc.ABC")
                                      or qual.startswith("torch.")):
                result = None
        info._resolving = False
        info._is_module = result
        return result

    def is_autograd_function_class(self, info: ClassInfo) -> bool:
        for base_expr, qual in zip(info.node.bases, info.bases):
            local = self.class_for_expr(base_expr)
            if local is not None and local is not info and self.is_autograd_function_class(local):
                return True
            if qual in ("torch.autograd.Function", "torch.autograd.function.Function",
                        "torch.autograd.function.InplaceFunction", "torch.autograd.InplaceFunction"):
                return True
        return False

    def calls_of_method(self, *names: str) -> list[ast.Call]:
        out: list[ast.Call] = []
        for name in names:
            out.extend(self.method_calls.get(name, ()))
        out.sort(key=lambda c: (c.lineno, c.col_offset))
        return out

    def imports_torch(self) -> bool:
        for bindings in self.module_scope.bindings.values():
            for b in bindings:
                if b.kind == "import" and isinstance(b.value, str) and b.value.split(".")[0] == "torch":
                    return True
        return False


def _inside_own_assignment(name_node: ast.Name, binding: Binding) -> bool:
    """``x = x.T``: the ``x`` read on the right is the previous binding, not
    this one (without this, following aliases loops forever)."""
    if binding.kind not in ("assign", "augassign"):
        return False
    if (getattr(binding.node, "end_lineno", None) or binding.lineno) < name_node.lineno:
        return False
    cur = getattr(name_node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, ast.stmt):
        if cur is binding.node:
            return True
        cur = getattr(cur, "_hl_parent", None)
    return cur is binding.node


def _all_args(args: ast.arguments) -> list[ast.arg]:
    out = list(args.posonlyargs) + list(args.args)
    if args.vararg:
        out.append(args.vararg)
    out.extend(args.kwonlyargs)
    if args.kwarg:
        out.append(args.kwarg)
    return out


def _arg_defaults(args: ast.arguments) -> list[ast.expr]:
    return list(args.defaults) + [d for d in args.kw_defaults if d is not None]


def positional_params(func: ast.AST) -> list[str]:
    """Names of a function's or lambda's positional parameters, in order."""
    args: ast.arguments = func.args  # type: ignore[attr-defined]
    return [a.arg for a in list(args.posonlyargs) + list(args.args)]


def is_staticmethod(func: ast.AST) -> bool:
    for dec in getattr(func, "decorator_list", ()):
        if isinstance(dec, ast.Name) and dec.id == "staticmethod":
            return True
        if isinstance(dec, ast.Attribute) and dec.attr == "staticmethod":
            return True
    return False


def is_classmethod(func: ast.AST) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "classmethod" for d in getattr(func, "decorator_list", ()))
