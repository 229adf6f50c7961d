"""Which files the graph layer imports, and what it builds from them.

Decided from the static pass alone (no torch, no user code): a file is
imported when it defines ``nn.Module`` subclasses at its top level, registers
a module hook on a built-in layer it constructs with literal arguments
(``conv = nn.Conv2d(3, 1, 3)``), builds a module class of the project it
imports (``net = Net(10)`` after ``from models import Net``) where hooks are
involved, or has a pytest fixture returning a model.

For an imported file, the instances to build are, in this order:

1. constructor calls the file itself makes with literal arguments
   (``MyNet()``, ``Conv2d(3, 1, 3)``, ``LinearCraft(20, 5, np.array([1, 3, 5]))``),
   wherever they are (in the ``__main__`` block too), except inside class
   bodies, where they are parts of a bigger model.  A name is literal when the
   kept definitions bind it, or when its only assignment in the scope of the
   call has a literal value (``n = 10`` then ``Net(n)`` in the ``__main__``
   block); ``args.width`` after ``args = parser.parse_args()`` is the
   ``default=`` of ``add_argument("--width", ...)``;
2. the no-argument constructor of every module class not built by step 1;
3. factories: functions of the file with no required argument that return a
   module class of the file (``def resnet18(**kw): return ResNet(...)``), for
   classes steps 1 and 2 did not build, and pytest fixtures returning a model;
4. (worker) a constructor whose required arguments are annotated with a class
   that needs no argument (``def __init__(self, cfg: NetConfig)``).

Factories from ``[tool.hooklint] models`` are handled by the worker.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hooklint.graph.sanitize import Sanitized, definitions_only
from hooklint.static.semantic import SemanticModel, is_torch_module_class

# Calls that build an array from literals, accepted inside constructor arguments.
ARRAY_CALLS = frozenset(
    f"{lib}.{name}"
    for lib, names in (
        ("numpy", ("array", "asarray", "arange", "zeros", "ones", "full", "eye", "linspace")),
        ("torch", ("tensor", "as_tensor", "arange", "zeros", "ones", "full", "eye", "linspace", "rand",
                   "randn", "randint", "randperm", "empty")),
    )
    for name in names
)
MAX_CALLS_PER_CLASS = 4
MAX_FACTORIES = 6
_BUILTINS = frozenset(dir(builtins))
_INLINE_DEPTH = 4


@dataclass(frozen=True)
class ClassCandidate:
    name: str
    line: int


@dataclass(frozen=True)
class ConstructorCall:
    node: ast.Call  # what to evaluate: the call, with inlined names replaced by their literal values
    text: str
    line: int
    class_name: str  # the class (or factory) called
    kind: str = "local"  # "local" class of the file, "torch" layer, "imported" class of the project


@dataclass(frozen=True)
class FactoryCandidate:
    name: str  # a top-level function of the file
    line: int
    returns: str | None  # the module class it visibly returns, when it names one
    fixture: bool = False  # a pytest fixture (called without its decorator)


@dataclass
class Plan:
    sanitized: Sanitized
    classes: list[ClassCandidate] = field(default_factory=list)
    calls: list[ConstructorCall] = field(default_factory=list)
    factories: list[FactoryCandidate] = field(default_factory=list)
    entries: list = field(default_factory=list)  # EntryConstruction: models the script builds from its options
    # the example input's size the file's data code shows ((C, H, W) or (H, W)), and why
    data_hint: tuple | None = None
    script: bool = False  # the file runs as a program (entry points, data hints)

    @property
    def has_work(self) -> bool:
        return bool(self.classes or self.calls or self.factories or self.entries)


def _substitute(node: Any, subs: dict[int, ast.expr]) -> Any:
    """A copy of ``node`` with the nodes whose id is in ``subs`` replaced (shared
    where nothing changed)."""
    if id(node) in subs:
        return subs[id(node)]
    if not isinstance(node, ast.AST):
        return node
    fields: dict[str, Any] = {}
    changed = False
    for name, value in ast.iter_fields(node):
        if isinstance(value, list):
            new: Any = [_substitute(v, subs) for v in value]
            changed |= any(a is not b for a, b in zip(new, value))
        else:
            new = _substitute(value, subs)
            changed |= new is not value
        fields[name] = new
    if not changed:
        return node
    out = type(node)(**fields)
    return ast.copy_location(out, node)


class _Planner:
    def __init__(self, tree: ast.Module, sanitized: Sanitized, context: "ProjectContext | None" = None):
        self.tree = tree
        self.model = SemanticModel(tree)
        self.sanitized = sanitized
        self.context = context
        self._hooks = None
        self._file_hooks: bool | None = None
        self._imports: dict[str, Any] = {}
        self._argparse: dict[str, ast.expr] | None = None

    # ------------------------------------------------------------ what the file has

    def module_classes(self) -> list[ClassCandidate]:
        imports_torch = self.model.imports_torch()
        out = []
        for stmt in self.tree.body:
            if not isinstance(stmt, ast.ClassDef) or stmt.name not in self.sanitized.kept_names:
                continue
            info = self.model.classes.get(stmt)
            if info is None:
                continue
            is_module = self.model.is_module_class(info)
            # A base from another file may be a module: worth a look when torch is around.
            if is_module or (is_module is None and imports_torch):
                out.append(ClassCandidate(stmt.name, stmt.lineno))
        return out

    @property
    def hooks(self):
        if self._hooks is None:
            from hooklint.static.hooks import HookIndex
            from hooklint.static.values import Inference

            self._hooks = HookIndex(self.model, Inference(self.model))
        return self._hooks

    def registers_module_hooks(self) -> bool:
        if self._file_hooks is None:
            names = self.model.method_calls
            self._file_hooks = any(name.startswith("register_") and "hook" in name for name in names) and any(
                reg.kind.is_module for reg in self.hooks.registrations)
        return self._file_hooks

    def _imported(self, func: ast.AST):
        """The project definition an imported callee names (``Net`` after ``from
        models import Net``), when hooks are involved: this file registers module
        hooks, or the class's file registers hooks (its classes may hook
        themselves).  Otherwise building it would teach the rules nothing."""
        if self.context is None or not hasattr(func, "_hl_scope"):
            return None
        qual = self.model.qualify(func)
        if qual is None or qual.startswith(("torch.", "builtins.", "<local>")):
            return None
        if qual not in self._imports:
            index = self.context.index
            target = index.target(qual, self.context.roots, self.context.path)
            relevant = target is not None and (self.registers_module_hooks() or index.registers_hooks(target.path))
            self._imports[qual] = index.definition(target) if relevant and target is not None else None
        return self._imports[qual]

    def _callee(self, call: ast.Call) -> tuple[str, str] | None:
        """(class name, kind) when ``call`` constructs a module: kind is "local",
        "torch" or "imported" (see :class:`ConstructorCall`)."""
        info = self.model.class_for_expr(call.func)
        if info is not None:
            if info.scope is self.model.module_scope and info.name in self.sanitized.kept_names \
                    and self.model.is_module_class(info) is not False:
                return info.name, "local"
            return None
        qual = self.model.qualify(call.func) if hasattr(call.func, "_hl_scope") else None
        if qual is not None and is_torch_module_class(qual):
            return qual.rsplit(".", 1)[-1], "torch"
        definition = self._imported(call.func)
        if definition is not None and definition.maybe_module:
            return definition.name, "imported"
        return None

    # ------------------------------------------------------------ literal arguments

    def literal(self, expr: ast.AST | None, subs: dict[int, ast.expr], depth: int = 0) -> bool:
        """Whether ``expr`` is literal (module docstring, step 1); names that are
        inlined are recorded in ``subs`` (node id -> literal value)."""
        if expr is None or isinstance(expr, ast.Constant):
            return True
        if isinstance(expr, ast.Name):
            if expr.id in self.sanitized.kept_names or expr.id in _BUILTINS:
                return True
            value = self._single_literal_binding(expr) if depth < _INLINE_DEPTH else None
            if value is not None and self.literal(value, subs, depth + 1):
                subs[id(expr)] = value
                return True
            return False
        if isinstance(expr, ast.Attribute):
            default = self._argparse_default(expr)
            if default is not None:
                subs[id(expr)] = default
                return True
            return self.literal(expr.value, subs, depth)
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            return all(self.literal(e, subs, depth) for e in expr.elts)
        if isinstance(expr, ast.Dict):
            return all(self.literal(k, subs, depth) for k in expr.keys) and all(
                self.literal(v, subs, depth) for v in expr.values)
        if isinstance(expr, ast.Starred):
            return self.literal(expr.value, subs, depth)
        if isinstance(expr, ast.UnaryOp):
            return self.literal(expr.operand, subs, depth)
        if isinstance(expr, ast.BinOp):
            return self.literal(expr.left, subs, depth) and self.literal(expr.right, subs, depth)
        if isinstance(expr, ast.Call):
            literal_args = all(self.literal(a, subs, depth) for a in expr.args) and all(
                self.literal(k.value, subs, depth) for k in expr.keywords)
            if not literal_args:
                return False
            qual = self.model.qualify(expr.func) if hasattr(expr.func, "_hl_scope") else None
            if qual is not None and qual.startswith("builtins."):
                qual = qual[len("builtins."):]
            return qual in ARRAY_CALLS or qual in _LITERAL_BUILDERS or self._callee(expr) is not None
        return False

    def _single_literal_binding(self, name: ast.Name) -> ast.expr | None:
        """The value of ``name`` when its scope assigns it exactly once (``n = 10``)."""
        if not hasattr(name, "_hl_scope"):
            return None
        bindings = self.model.bindings_at(name)
        if len(bindings) != 1:
            return None
        binding = bindings[0]
        if binding.kind != "assign" or binding.path or not isinstance(binding.value, ast.expr):
            return None
        if len(binding.scope.bindings.get(name.id, ())) != 1:
            return None  # reassigned: which value reaches the call is not certain
        return binding.value

    def _argparse_default(self, expr: ast.Attribute) -> ast.expr | None:
        """``args.width`` after ``args = parser.parse_args()``: the literal ``default=``
        of the ``add_argument`` that defines it."""
        base = expr.value
        if not isinstance(base, ast.Name) or not hasattr(base, "_hl_scope"):
            return None
        bindings = self.model.bindings_at(base)
        if len(bindings) != 1 or bindings[0].kind != "assign":
            return None
        value = bindings[0].value
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                and value.func.attr in ("parse_args", "parse_known_args")):
            return None
        if self._argparse is None:
            self._argparse = self._argparse_defaults()
        return self._argparse.get(expr.attr)

    def _argparse_defaults(self) -> dict[str, ast.expr]:
        out: dict[str, ast.expr] = {}
        for call in self.model.calls_of_method("add_argument"):
            names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            keywords = {k.arg: k.value for k in call.keywords if k.arg}
            dest = keywords.get("dest")
            if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
                key = dest.value
            else:
                longs = [n for n in names if n.startswith("--")]
                plain = [n for n in names if not n.startswith("-")]
                option = longs[0][2:] if longs else plain[0] if plain else None
                if option is None:
                    continue
                key = option.replace("-", "_")
            default = keywords.get("default")
            action = keywords.get("action")
            if default is None and isinstance(action, ast.Constant) and action.value in ("store_true",
                                                                                          "store_false"):
                default = ast.copy_location(ast.Constant(action.value == "store_false"), call)
            if default is not None and self.literal(default, {}):
                out[key] = default
        return out

    def literal_call(self, call: ast.Call) -> ast.Call | None:
        """The call with literal arguments (inlined names replaced), or None."""
        subs: dict[int, ast.expr] = {}
        if not (all(self.literal(a, subs) for a in call.args) and all(
                k.arg is not None or isinstance(k.value, ast.Name) for k in call.keywords)
                and all(self.literal(k.value, subs) for k in call.keywords)):
            return None
        return _substitute(call, subs) if subs else call

    # ------------------------------------------------------------ what to build

    def hooked_calls(self) -> set[int]:
        """ids of built-in layer constructions that receive a module hook in this file."""
        out = set()
        for reg in self.hooks.registrations:
            module = reg.receiver_module
            if reg.kind.is_module and module is not None and module.call is not None:
                out.add(id(module.call))
        return out

    def constructor_calls(self, classes: list[ClassCandidate]) -> list[ConstructorCall]:
        local_names = {c.name for c in classes}
        hooked: set[int] | None = None
        seen: set[str] = set()
        per_class: dict[str, int] = {}
        calls = self.model.name_calls.values(), self.model.method_calls.values()
        candidates = sorted((c for group in calls for lst in group for c in lst),
                            key=lambda c: (c.lineno, c.col_offset))
        out = []
        for call in candidates:
            callee = self._callee(call)
            if callee is None or self._inside_class(call):
                continue
            name, kind = callee
            if kind == "local" and name not in local_names:
                continue
            if kind == "torch":
                if hooked is None:
                    hooked = self.hooked_calls()
                if id(call) not in hooked:
                    continue
            node = self.literal_call(call)
            if node is None:
                continue
            text = ast.unparse(node)
            if text in seen or per_class.get(name, 0) >= MAX_CALLS_PER_CLASS:
                continue
            seen.add(text)
            per_class[name] = per_class.get(name, 0) + 1
            out.append(ConstructorCall(node, text, call.lineno, name, kind))
        return out

    def factories(self, classes: list[ClassCandidate]) -> list[FactoryCandidate]:
        local_names = {c.name for c in classes}
        out = []
        for stmt in self.tree.body:
            if not isinstance(stmt, ast.FunctionDef):  # (an async factory cannot be called plainly)
                continue
            if stmt.name not in self.sanitized.kept_names or _required_arguments(stmt.args):
                continue
            fixture = any(_decorator_name(d) in ("fixture", "yield_fixture") for d in stmt.decorator_list)
            returns = self._returned_class(stmt)
            if returns is None:
                continue
            name, kind = returns
            if fixture or (kind == "local" and name in local_names):
                out.append(FactoryCandidate(stmt.name, stmt.lineno, name, fixture))
            if len(out) >= MAX_FACTORIES:
                break
        return out

    def _returned_class(self, fn: ast.FunctionDef) -> tuple[str, str] | None:
        """The module class a function visibly returns (or yields): ``return Net(...)``,
        ``model = Net(...); return model``, or a builder given the class
        (``return build_model_with_cfg(ResNet, ...)``)."""
        for node in ast.walk(fn):
            if not isinstance(node, (ast.Return, ast.Yield)) or node.value is None:
                continue
            value = node.value
            if isinstance(value, ast.Name) and hasattr(value, "_hl_scope"):
                bindings = self.model.bindings_at(value)
                if len(bindings) == 1 and bindings[0].kind == "assign" and isinstance(bindings[0].value, ast.Call):
                    value = bindings[0].value
            if not isinstance(value, ast.Call):
                continue
            callee = self._callee(value)
            if callee is not None and callee[1] != "torch":
                return callee
            for arg in value.args:
                if isinstance(arg, ast.Name):
                    info = self.model.class_for_expr(arg)
                    if info is not None and info.scope is self.model.module_scope \
                            and self.model.is_module_class(info) is not False:
                        return info.name, "local"
        return None

    def _inside_class(self, node: ast.AST) -> bool:
        return any(isinstance(a, ast.ClassDef) for a in self.model.ancestors(node))

    # ------------------------------------------------------------ entry points

    def entries(self, calls: list[ConstructorCall]) -> list:
        """Models the file builds from its command line (:mod:`hooklint.graph.entry`),
        where hooks are involved."""
        if self.context is None:
            return []
        from hooklint.graph.entry import EntryPlanner

        planner = EntryPlanner(self.tree, self.sanitized.kept_names, self._model_callee, self._hooks_involved,
                               self._callee_keys)
        planner.method_calls = self.model.method_calls
        planner.commands = self._documented_commands()
        return planner.entries({c.line for c in calls})

    def _documented_commands(self) -> list:
        """Command lines the project's READMEs and shell scripts give for this script."""
        from hooklint.graph.entry import documented_commands, option_strings

        if "add_argument" not in self.model.method_calls:
            return []
        options = option_strings(self.tree)
        if not options:
            return []
        texts = project_documents(self.context.path.parent, self.context.roots)
        return documented_commands(self.context.path.name, texts, options)

    def _callee_keys(self, call: ast.Call, position: int | None, keyword: str | None) -> list:
        """Keys of the dictionary of factories the called project function indexes
        with the argument at ``position`` (or ``keyword``)."""
        from hooklint.graph.entry import keys_indexed_by
        from hooklint.graph.project import parse_file

        func = call.func
        node = None
        tree = self.tree
        if isinstance(func, ast.Name) and hasattr(func, "_hl_scope"):
            bindings = self.model.bindings_at(func)
            if len(bindings) == 1 and bindings[0].kind == "def":
                node = bindings[0].node
        if node is None and hasattr(func, "_hl_scope"):
            target = self._project_target(func)
            if target is None or target.kind != "function":
                return []
            tree = parse_file(target.path)
            node = next((s for s in (tree.body if tree is not None else []) if isinstance(
                s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == target.name), None)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or tree is None:
            return []
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        param = keyword if keyword is not None else params[position] if position is not None and \
            position < len(params) else None
        return keys_indexed_by(node, param, tree) if param else []

    def _model_callee(self, call: ast.Call) -> bool:
        """A class or function of the project that can build a module."""
        func = call.func
        if isinstance(func, ast.Name) and hasattr(func, "_hl_scope"):
            bindings = self.model.bindings_at(func)
            if len(bindings) == 1 and bindings[0].kind == "def":
                return not _returns_parsed_arguments(bindings[0].node)
            if len(bindings) == 1 and bindings[0].kind == "class":
                info = self.model.classes.get(bindings[0].node)
                return info is not None and self.model.is_module_class(info) is not False
        target = self._project_target(func)
        if target is None:
            return False
        definition = self.context.index.definition(target)
        return definition is not None and (definition.kind == "function" or definition.maybe_module)

    def _project_target(self, func: ast.AST):
        """The project definition a callee names, through the file's imports (star
        imports included)."""
        if not hasattr(func, "_hl_scope"):
            return None
        qual = self.model.qualify(func)
        candidates = [qual] if qual is not None else []
        if qual is None and isinstance(func, ast.Name) and not self.model.bindings_at(func):
            from hooklint.static.hooked_params import star_imports

            candidates = [f"{module}.{func.id}" for module in star_imports(self.tree)]
        for candidate in candidates:
            if candidate.startswith(("torch.", "builtins.", "<local>")):
                continue
            target = self.context.index.target(candidate, self.context.roots, self.context.path)
            if target is not None:
                return target
        return None

    def _hooks_involved(self, binding: str, uses: list[ast.AST], construction: ast.Call) -> bool:
        """Building the model teaches the rules something: this file registers
        module hooks, or the model is handed to code of the project that (through
        its parameters, across files) registers some."""
        if self.registers_module_hooks():
            return True
        from hooklint.graph.crossfile import project_hooks

        hooks = project_hooks(self.context)
        info = hooks.info(str(self.context.path))
        if info is None:
            return False
        own = self._own_calls(info)
        for use in uses:
            parent = getattr(use, "_hl_parent", None)
            child = use
            while True:
                if isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is child:
                    child, parent = parent, getattr(parent, "_hl_parent", None)  # `watch(model.fc1)`
                elif isinstance(parent, ast.Call) and parent.func is child and isinstance(child, ast.Attribute) \
                        and child.attr in _SAME_MODULE_METHODS:
                    child, parent = parent, getattr(parent, "_hl_parent", None)  # `distill(model.cuda())`
                else:
                    break
            if isinstance(parent, ast.keyword):
                parent = getattr(parent, "_hl_parent", None)
            if not isinstance(parent, ast.Call) or parent.func is child:
                continue
            call = own.get((parent.lineno, parent.col_offset))
            key = hooks.resolve(info, call) if call is not None else None
            if key is None:
                if self._packed_for_hooking_code(parent, hooks, info, own):
                    return True
                continue
            position = next((i for i, a in enumerate(parent.args) if a is child), None)
            keyword = next((k.arg for k in parent.keywords if k.value is child), None)
            for hook in hooks.hooks_of(key):  # handed to a parameter that ends up hooked
                if (keyword is not None and keyword == hook.ref.param) or (
                        position is not None and position == hook.ref.position):
                    return True
            if hooks.registers_hooks(key):
                return True  # the project's hooking code takes it, in a way the summaries do not follow
        return False

    def _own_calls(self, info) -> dict[tuple[int, int], ast.Call]:
        """The calls of the project's parse of this file, by position (once per file)."""
        if getattr(self, "_calls_by_position", None) is None:
            self._calls_by_position = {(n.lineno, n.col_offset): n for n in ast.walk(info.tree)
                                       if isinstance(n, ast.Call)}
        return self._calls_by_position

    def _packed_for_hooking_code(self, packing: ast.Call, hooks, info, own) -> bool:
        """``cfg = dict(arch=model, layer_name=...)`` then ``ScoreCAM(cfg)``: the model
        travels in a dictionary to code of the project that registers module hooks
        (built so that ``hooklint graph`` shows it; linking does not follow it)."""
        if not (isinstance(packing.func, ast.Name) and packing.func.id == "dict"):
            return False
        holder = getattr(packing, "_hl_parent", None)
        if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name)):
            return False
        name = holder.targets[0].id
        scope = getattr(holder, "_hl_parent", None)
        for node in ast.walk(scope) if scope is not None else ():
            if isinstance(node, ast.Call) and node.lineno > holder.lineno and any(
                    isinstance(a, ast.Name) and a.id == name for a in [*node.args, *(k.value for k in node.keywords)]):
                call = own.get((node.lineno, node.col_offset))
                key = hooks.resolve(info, call) if call is not None else None
                if key is not None and hooks.registers_hooks(key):
                    return True
        return False


def _returns_parsed_arguments(function: ast.AST) -> bool:
    """``def parse_args(): ...; return parser.parse_args()`` (or the name it was
    assigned to, or ``-> argparse.Namespace``): options, not a model."""
    returns = getattr(function, "returns", None)
    if returns is not None and "Namespace" in ast.unparse(returns):
        return True
    parsed: set[str] = set()

    def is_parse(value: ast.AST | None) -> bool:
        return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
            and value.func.attr in ("parse_args", "parse_known_args")

    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and is_parse(node.value):
            parsed |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and (is_parse(node.value) or (
                isinstance(node.value, ast.Name) and node.value.id in parsed)):
            return True
    return False


def _required_arguments(args: ast.arguments) -> int:
    positional = args.posonlyargs + args.args
    required = len(positional) - len(args.defaults)
    required += sum(1 for default in args.kw_defaults if default is None)
    return required


def _decorator_name(decorator: ast.expr) -> str:
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    if isinstance(decorator, ast.Attribute):
        return decorator.attr
    return decorator.id if isinstance(decorator, ast.Name) else ""


# Calls that build plain values, accepted inside constructor arguments (``Net(**dict(width=8))``).
_LITERAL_BUILDERS = frozenset({"dict", "list", "tuple", "set", "frozenset", "range", "int", "float", "str",
                               "bool", "len", "min", "max", "abs", "round", "sum", "sorted"})


# Module methods that return the module itself.
_SAME_MODULE_METHODS = frozenset({"to", "cuda", "cpu", "eval", "train", "float", "double", "half", "bfloat16"})


class ProjectContext:
    """What the planner of one file needs to know about the project's other files."""

    def __init__(self, path: str, roots, index, config_root: Path | None = None, pythonpath=()) -> None:
        self.path = Path(path)
        self.roots = roots
        self.index = index
        self.config_root = config_root if config_root is not None else Path.cwd()
        self.pythonpath = tuple(pythonpath)



def plan_for(tree: ast.Module, context: ProjectContext | None = None) -> Plan:
    sanitized = definitions_only(tree)
    planner = _Planner(tree, sanitized, context)
    classes = planner.module_classes()
    calls = planner.constructor_calls(classes)
    from hooklint.graph.entry import is_script

    plan = Plan(sanitized, classes, calls, planner.factories(classes), planner.entries(calls))
    plan.script = is_script(tree, planner.model.method_calls)
    return plan


def project_context(path: str, config_root: Path, pythonpath=(), index=None,
                    tree: ast.Module | None = None) -> ProjectContext:
    from hooklint.graph.project import ProjectIndex
    from hooklint.graph.roots import file_roots

    relative = tree is not None and any(isinstance(n, ast.ImportFrom) and n.level for n in tree.body)
    roots = file_roots(path, config_root, pythonpath, relative)
    return ProjectContext(path, roots, index or ProjectIndex(), config_root, pythonpath)


_DOCUMENT_SUFFIXES = (".md", ".sh", ".txt", ".rst", ".bash")
_DOCUMENT_FOLDERS = ("", "scripts", "script", "run", "runs", "experiments", "exp", "docs", "bash", "shell")
_MAX_DOCUMENTS = 40
_MAX_DOCUMENT_BYTES = 512 * 1024


def project_documents(folder: Path, roots) -> list[tuple[str, str]]:
    """(name, text) of the READMEs and shell scripts next to a script and at its
    project root (and their usual script folders), where commands are documented."""
    from hooklint.graph.roots import project_root

    bases = [folder]
    root = project_root(folder)
    if root is not None and root != folder:
        bases.append(root)
    out: list[tuple[str, str]] = []
    seen: set[Path] = set()
    for base in bases:
        for sub in _DOCUMENT_FOLDERS:
            where = base / sub if sub else base
            try:
                entries = sorted(where.iterdir()) if where.is_dir() else []
            except OSError:
                continue
            for entry in entries:
                if len(out) >= _MAX_DOCUMENTS:
                    return out
                if entry in seen or not entry.name.endswith(_DOCUMENT_SUFFIXES) or not entry.is_file():
                    continue
                seen.add(entry)
                try:
                    if entry.stat().st_size > _MAX_DOCUMENT_BYTES:
                        continue
                    text = entry.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                try:
                    name = entry.relative_to(root).as_posix() if root is not None else entry.name
                except ValueError:
                    name = entry.name
                out.append((name, text))
    return out


# A module class or layer can only come from an import naming one of these.
_TEXT_HINTS = ("torch", "lightning", "transformers")


def wants_import(text: str, path: str | None = None, config_root: Path | None = None, pythonpath=(),
                 index=None) -> bool:
    """Whether the graph layer should import this file (see the module docstring)."""
    return planned(text, path, config_root, pythonpath, index) is not None


def planned(text: str, path: str | None = None, config_root: Path | None = None, pythonpath=(),
            index=None) -> Plan | None:
    """The file's plan when the graph layer should import it, else None."""
    # a script hands a model to the project's code that hooks it (an explainer, an optimizer): entry points
    project_hint = path is not None and ("import" in text) and (
        "register_" in text or "fixture" in text or "__main__" in text or "parse_args" in text)
    if not any(h in text for h in _TEXT_HINTS) and not project_hint:
        return None
    try:
        tree = ast.parse(text)
        context = project_context(path, config_root or Path.cwd(), pythonpath, index, tree) \
            if path is not None else None
        plan = plan_for(tree, context)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not plan.has_work:
        return None
    from hooklint.graph.entry import data_hint

    # the size a script's data code feeds (a library module feeds nothing)
    plan.data_hint = data_hint(tree) if plan.script else None
    return plan


def plan_digest(plan: Plan, text: str) -> str:
    """What the worker runs for a file, with its line numbers: its kept definitions,
    the constructions and entry slices, the data code's input size.  An edit that
    changes none of them (a comment, the body of a training loop that stays below
    the model's construction) gives the same digest, and the facts cached for it
    still hold."""
    import hashlib
    from bisect import bisect_left, bisect_right

    from hooklint.graph.code_text import code_lines

    # each kept top-level statement's lines of code, with their numbers (cheaper than dumping the
    # tree); comments and blank lines between them do not count, a line moved to another number does
    coded = code_lines(text)
    if coded is None:
        coded = list(enumerate(text.splitlines(), 1))
    rows = [row for row, _ in coded]
    parts = []
    for stmt in plan.sanitized.tree.body:
        # (a decorated definition starts at its first decorator)
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", ())])
        last = stmt.end_lineno or stmt.lineno
        kept = coded[bisect_left(rows, first):bisect_right(rows, last)]
        parts.append(f"{first}-{last}:" + "\n".join(f"{row}\t{line}" for row, line in kept))
    parts.append(repr(plan.data_hint))
    parts += [f"{c.text}@{c.line}:{c.kind}" for c in plan.calls]
    parts += [repr((f.name, f.line, f.returns, f.fixture)) for f in plan.factories]
    parts += [repr((c.name, c.line)) for c in plan.classes]
    for entry in plan.entries:
        parts.append(ast.dump(entry.program, include_attributes=True))
        parts.append(repr((entry.binding, entry.line, entry.scope, entry.text, entry.options, entry.variants,
                           entry.weights, entry.open_options, entry.variants_capped)))
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
