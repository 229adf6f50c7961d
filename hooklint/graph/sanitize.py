"""Keep only the definitions of a model file, so that importing it runs no
training loop, writes no file and starts nothing.

Model files are often scripts: classes at the top, then a training loop and
an ``if __name__ == "__main__":`` block.  The worker executes only what
:func:`definitions_only` keeps, at the top level of the file (and of the
user's own modules it imports):

* imports, ``def`` and ``class`` statements (their bodies, decorators and
  default values run as Python runs them: that is the definition);
* assignments of inert values: literals, names, attributes, containers and
  arithmetic of those, lambdas;
* assignments of *computed* values, which definitions often need
  (``_registry = set()``, ``__version__ = get_version()``, ``MIN_TORCH =
  version.parse("1.8")``, ``to_2tuple = _ntuple(2)``): calls of builtins, of
  imported functions and classes, of the file's own functions and of its
  classes that are not modules, with arguments of the same kind, and methods
  of such values (``torch.tensor(MEAN).view(1, 3, 1, 1)``).  Not kept: a
  model built at import time (a call of the file's own module classes, or of
  ``from_pretrained``), a method of an object the script made (``trainer.fit(
  model)``, ``parser.parse_args()``), loading and saving (``torch.load``,
  ``torch.hub``), and the calls in :data:`EFFECT_CALLS`.  Each computed
  statement runs inside ``try``: when it fails (a file it reads is missing,
  the audit hook refuses a download), its name stays unbound and the import
  goes on;
* updates of the file's own containers (``__all__ += [...]``,
  ``_MODELS["resnet"] = ResNet``, ``__all__.append("Net")``) and calls that
  fill the file's own registry (``register_backend(spec)`` with
  ``register_backend`` defined in the file, ``_REGISTRY.register(...)``: a
  name starting with ``register``, hooks excepted), inside ``try`` too;
* ``try`` blocks and ``if`` statements whose test is inert or computed (``if
  TYPE_CHECKING:``, ``if version.parse(torch.__version__) >= ...:``), filtered
  the same way;
* docstrings, ``pass`` and ``raise``.

Everything else is dropped: expression statements (``net.train()``,
``torch.manual_seed(0)``), loops, ``with`` blocks, stores into imported
objects (``torch.backends.cudnn.benchmark = True``), and every ``if`` that
tests ``__name__``.  Line numbers are kept, so tracebacks and fx stack traces
point at the user's real lines.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

# Calls that build a value and do nothing else; by qualified name.  Their
# assignments are kept as they are (not inside ``try``).
INERT_CALLS = frozenset(
    {
        "logging.getLogger",
        "typing.TypeVar",
        "typing.NewType",
        "typing.NamedTuple",
        "typing.cast",
        "collections.namedtuple",
        "functools.partial",
        "torch.device",
        "os.environ.get",
        "os.getenv",
    }
)

# Builtins a computed value may not call: they run code, read input or end the program.
UNSAFE_BUILTINS = frozenset({"exec", "eval", "compile", "input", "open", "breakpoint", "exit", "quit", "help",
                             "__import__", "setattr", "delattr"})

# Calls (by qualified name, or a prefix ending in ".") whose result is not a
# definition: loading, saving, processes, global state, sleeping.
EFFECT_CALLS = (
    "torch.load", "torch.save", "torch.hub.", "torch.jit.load", "torch.compile", "torch.manual_seed", "torch.set_",
    "torch.use_deterministic_algorithms", "torch.cuda.manual_seed", "torch.cuda.set_device", "torch.cuda.init",
    "torch.distributed.", "torch.multiprocessing.",
    "os.system", "os.remove", "os.unlink", "os.makedirs", "os.mkdir", "os.rename", "os.chdir", "os.kill",
    "os.fork", "os.exec", "os.spawn", "os.popen", "os.putenv", "subprocess.", "shutil.", "sys.exit", "time.sleep",
    "random.seed", "numpy.random.seed", "socket.", "urllib.", "requests.",
    "pickle.load", "json.load", "wandb.", "mlflow.", "tensorboard", "torch.utils.tensorboard.", "atexit.",
    "multiprocessing.Pool", "multiprocessing.Process", "threading.Thread", "threading.Timer",
    "signal.", "builtins.open", "io.open", "pathlib.Path.write",
)

# Methods that run, train, load or move things: never part of a definition.
EFFECT_METHODS = frozenset({
    "fit", "train", "eval", "backward", "step", "run", "parse_args", "parse_known_args", "cuda", "to", "download",
    "save", "load_state_dict", "from_pretrained", "wait", "join", "start", "evaluate", "predict", "test",
    "validate", "write", "write_text", "write_bytes", "mkdir", "unlink", "touch", "open", "read", "read_text",
    "read_bytes", "zero_grad", "register_forward_hook", "register_backward_hook", "register_full_backward_hook",
    "register_hook", "apply", "compile", "half", "float", "double", "share_memory", "seed",
})

# Methods that read a value of the file's own (``{v: k for k, v in _TO_STR.items()}``).
PURE_METHODS = frozenset({
    "items", "keys", "values", "get", "copy", "index", "count", "split", "rsplit", "join", "format", "lower",
    "upper", "strip", "lstrip", "rstrip", "replace", "startswith", "endswith", "partition", "rpartition",
    "encode", "decode", "union", "intersection", "difference", "issubset", "issuperset", "_replace", "_asdict",
})

# Methods that fill a container of the file's own (``__all__.append("Net")``).
CONTAINER_METHODS = frozenset({"append", "extend", "insert", "update", "add", "setdefault"})

_BUILTIN_NAMES = frozenset(dir(builtins))
# Libraries whose classes are (or may be) models: a class based on one of theirs is not plain.
_MODEL_LIBRARIES = frozenset({"torch", "lightning", "pytorch_lightning", "transformers", "timm", "torchvision",
                              "diffusers", "peft", "accelerate"})


@dataclass
class Sanitized:
    tree: ast.Module  # the statements to execute (original line numbers)
    skipped_lines: list[int] = field(default_factory=list)  # first lines of the dropped statements
    skipped_names: set[str] = field(default_factory=set)  # names only dropped statements bind
    kept_names: set[str] = field(default_factory=set)  # names the kept statements bind at top level
    aliases: dict[str, str] = field(default_factory=dict)  # import_aliases() of the file
    # names bound by computed values (kept inside ``try``: unbound when computing them failed), with the line
    computed_names: dict[str, int] = field(default_factory=dict)


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Top-level names bound by imports (in the body and its if/try blocks:
    what top-level statements can read), mapped to what they import."""
    aliases: dict[str, str] = {}
    for node in _top_level(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def qualified_name(expr: ast.AST, aliases: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    head = aliases.get(expr.id, expr.id)
    return ".".join([head, *reversed(parts)])


_MODULE_DUNDERS = frozenset({"__name__", "__file__", "__doc__", "__package__", "__spec__", "__loader__",
                             "__builtins__", "__annotations__", "__path__"})


class _Filter:
    def __init__(self, tree: ast.Module):
        self.aliases = import_aliases(tree)
        self.result = Sanitized(ast.Module(body=[], type_ignores=[]), aliases=self.aliases)
        # names the kept statements bound so far: an inert value may only read these
        self.bound: set[str] = set(dir(builtins)) | _MODULE_DUNDERS
        self.imported: set[str] = set()
        self.functions: set[str] = set()
        self.plain_classes: set[str] = set()  # classes of this file that are certainly not modules
        self.containers: set[str] = set()  # names bound by assignments of this file (not imports)
        self.own: set[str] = set()  # every name the kept statements bind
        self.star_import = False  # a kept `from x import *` (its names are not known here)

    # ------------------------------------------------------------ values

    def is_inert(self, expr: ast.AST | None) -> bool:
        """A value that computes nothing: literals, names, containers, arithmetic."""
        return self._value(expr, computed=False)

    def is_computable(self, expr: ast.AST | None) -> bool:
        """A value whose calls are all of the kinds described in the module docstring."""
        return self._value(expr, computed=True)

    def _value(self, expr: ast.AST | None, computed: bool) -> bool:
        check = self.is_computable if computed else self.is_inert
        if expr is None or isinstance(expr, (ast.Constant, ast.Lambda)):
            return True
        if isinstance(expr, ast.Name):
            # after `from x import *` an unknown name may be one of x's: computed (kept inside `try`)
            return expr.id in self.bound or (computed and self.star_import and expr.id not in
                                             self.result.skipped_names)
        if isinstance(expr, ast.Attribute):
            return check(expr.value)
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            return all(check(e) for e in expr.elts)
        if isinstance(expr, ast.Dict):
            return all(check(k) for k in expr.keys if k is not None) and all(check(v) for v in expr.values)
        if isinstance(expr, ast.Starred):
            return check(expr.value)
        if isinstance(expr, ast.UnaryOp):
            return check(expr.operand)
        if isinstance(expr, ast.BinOp):
            return check(expr.left) and check(expr.right)
        if isinstance(expr, ast.BoolOp):
            return all(check(v) for v in expr.values)
        if isinstance(expr, ast.Compare):
            return check(expr.left) and all(check(c) for c in expr.comparators)
        if isinstance(expr, ast.IfExp):
            return check(expr.test) and check(expr.body) and check(expr.orelse)
        if isinstance(expr, ast.Subscript):  # typing aliases: Optional[int], Dict[str, nn.Module]
            return check(expr.value) and check(expr.slice)
        if isinstance(expr, ast.Slice):
            return check(expr.lower) and check(expr.upper) and check(expr.step)
        if isinstance(expr, ast.JoinedStr):
            return all(check(v) for v in expr.values)
        if isinstance(expr, ast.FormattedValue):
            return check(expr.value)
        if isinstance(expr, ast.Call):
            args_ok = all(check(a) for a in expr.args) and all(check(k.value) for k in expr.keywords)
            if not args_ok:
                return False
            if qualified_name(expr.func, self.aliases) in INERT_CALLS:
                return True
            return computed and self._computable_callee(expr.func)
        if computed and isinstance(expr, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            # `{k: v for k, v in DEFAULTS.items()}`: the iterables must be computable; the loop
            # variables are local to the comprehension
            inner = {n.id for gen in expr.generators for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
            saved = self.bound
            self.bound = self.bound | inner
            try:
                parts = [expr.key, expr.value] if isinstance(expr, ast.DictComp) else [expr.elt]
                return all(self.is_computable(gen.iter) and all(self.is_computable(c) for c in gen.ifs)
                           for gen in expr.generators) and all(self.is_computable(p) for p in parts)
            finally:
                self.bound = saved
        return False

    def _computable_callee(self, func: ast.AST) -> bool:
        if isinstance(func, ast.Name):
            name = func.id
            if name in self.imported:
                return not _is_effect(qualified_name(func, self.aliases) or name)
            if name in self.functions or name in self.plain_classes:
                return True
            return name in _BUILTIN_NAMES and name not in self.own and name not in UNSAFE_BUILTINS
        if isinstance(func, ast.Attribute):
            head = func.value
            while isinstance(head, ast.Attribute):
                head = head.value
            if isinstance(head, ast.Name) and head.id in self.imported:  # `torch.zeros`, `re.compile`
                return not _is_effect(qualified_name(func, self.aliases) or "")
            if func.attr in EFFECT_METHODS:
                return False
            if isinstance(head, ast.Name):
                if (head.id in _BUILTIN_NAMES and head.id not in self.own) or head.id in self.plain_classes:
                    return True  # `dict.fromkeys(...)`, `str.maketrans(...)`, `Config.default()`
                # a method of an object the script made (`trainer.fit`, `parser.parse_args`) is not
                # a definition; reading one of its own containers or strings is
                return func.attr in PURE_METHODS and head.id in self.bound
            return self.is_computable(func.value)  # `torch.tensor(MEAN).view`, `"a,b".split`
        return False

    # ------------------------------------------------------------ statements

    @staticmethod
    def _plain_targets(targets: list[ast.expr]) -> bool:
        """Only names are bound (no attribute or item stores, which mutate objects)."""
        def plain(t: ast.expr) -> bool:
            if isinstance(t, ast.Name):
                return True
            if isinstance(t, (ast.Tuple, ast.List)):
                return all(plain(e) for e in t.elts)
            if isinstance(t, ast.Starred):
                return plain(t.value)
            return False

        return all(plain(t) for t in targets)

    def _own_store(self, target: ast.expr) -> bool:
        """``_MODELS["x"]`` or ``Net.default_cfg``: a store into the file's own container or class."""
        base = target
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            if isinstance(base, ast.Subscript) and not self.is_computable(base.slice):
                return False
            base = base.value
        if not isinstance(base, ast.Name) or base is target:
            return False
        return base.id in self.containers or base.id in self.functions or base.id in self.plain_classes

    @staticmethod
    def _tests_name(test: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(test))

    def block(self, body: list[ast.stmt]) -> list[ast.stmt]:
        kept: list[ast.stmt] = []
        for stmt in body:
            new = self.statement(stmt)
            if new is None:
                self.result.skipped_lines.append(stmt.lineno)
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        self.result.skipped_names.add(node.id)
            else:
                kept.append(new)
                self._bind(new)
        return kept

    def _bind(self, stmt: ast.stmt) -> None:
        names = _bound_names(stmt)
        self.bound |= names
        self.own |= names
        for node in _top_level([stmt]):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name != "*":
                        self.imported.add((alias.asname or alias.name).split(".")[0])
                    else:
                        self.star_import = True
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.add(node.name)
            elif isinstance(node, ast.ClassDef):
                if self._plain_class(node):
                    self.plain_classes.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self.containers |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}

    def _registration(self, func: ast.AST) -> bool:
        """``register_backend(spec)``, ``AutoConfig.register("x", XConfig)``: filling a
        registry that definitions look things up in.  Not a hook registration
        (a global module hook would act on every model the worker analyses)."""
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if not name.startswith("register") or "hook" in name:
            return False
        head = func
        while isinstance(head, ast.Attribute):
            head = head.value
        # the file's own registry (a function, class or container of this file): a registry
        # of another module is filled by that module, and filling it from here can run code
        # (imports) at a moment the real import order would not
        return isinstance(head, ast.Name) and (head.id in self.functions or head.id in self.plain_classes
                                               or head.id in self.containers)

    def _plain_class(self, node: ast.ClassDef) -> bool:
        """A class that is not a model: no base is a module class of torch (or of a
        library built on it) or of this file.  Building one, or calling its class
        methods (``CONFIG = Config.load()``), at import time builds no model.  A
        base imported from elsewhere that is a module after all (a project's
        ``BaseNet``) makes a top-level ``net = Net()`` build a model: inside
        ``try`` and the step's time budget, like any computed value."""
        for base in node.bases:
            if isinstance(base, ast.Subscript):  # Generic[T], NamedTuple[...]
                base = base.value
            if isinstance(base, ast.Name) and base.id in self.plain_classes:
                continue
            if isinstance(base, ast.Name) and base.id in self.own and base.id not in self.imported:
                return False  # a class of this file that is a module (or something unknown)
            qual = qualified_name(base, self.aliases) or ""
            if qual.split(".")[0] in _MODEL_LIBRARIES or qual.endswith((".Module", "nn.Module")) \
                    or not base_is_import(base, self.imported) and not (
                        isinstance(base, ast.Name) and base.id in _BUILTIN_NAMES):
                return False
        return all(k.arg == "metaclass" and self.is_inert(k.value) for k in node.keywords)

    def _guarded(self, stmt: ast.stmt, names: set[str]) -> ast.stmt:
        """``stmt`` inside ``try: ... except Exception: pass`` (a computed value that
        fails leaves its names unbound)."""
        for name in names:
            self.result.computed_names.setdefault(name, stmt.lineno)
        caught = [ast.copy_location(ast.Name(name, ast.Load()), stmt) for name in ("Exception", "SystemExit")]
        handler = ast.copy_location(ast.ExceptHandler(
            type=ast.copy_location(ast.Tuple(elts=caught, ctx=ast.Load()), stmt), name=None, body=[_pass(stmt)]),
            stmt)
        guard = ast.copy_location(ast.Try(body=[stmt], handlers=[handler], orelse=[], finalbody=[]), stmt)
        guard._hl_guard = True  # type: ignore[attr-defined]
        return guard

    def statement(self, stmt: ast.stmt) -> ast.stmt | None:
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                             ast.Pass, ast.Raise)):
            return stmt
        if isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                return stmt
            call = stmt.value
            if not isinstance(call, ast.Call) or not all(self.is_computable(a) for a in call.args) \
                    or not all(self.is_computable(k.value) for k in call.keywords):
                return None
            if isinstance(call.func, ast.Attribute) and call.func.attr in CONTAINER_METHODS \
                    and isinstance(call.func.value, ast.Name) and call.func.value.id in self.containers:
                return self._guarded(stmt, set())
            if self._registration(call.func):
                return self._guarded(stmt, set())
            return None
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            value = stmt.value
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if value is None:
                return None
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if self._plain_targets(targets):
                if self.is_inert(value):
                    reads = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
                    # an alias of a computed value is unbound when computing it failed
                    return self._guarded(stmt, names) if reads & set(self.result.computed_names) else stmt
                if self.is_computable(value):
                    return self._guarded(stmt, names)
                return None
            if all(self._own_store(t) for t in targets) and self.is_computable(value):
                return self._guarded(stmt, set())
            return None
        if isinstance(stmt, ast.AugAssign):
            target = stmt.target
            if isinstance(target, ast.Name) and target.id in self.bound and self.is_computable(stmt.value):
                return self._guarded(stmt, set())
            if self._own_store(target) and self.is_computable(stmt.value):
                return self._guarded(stmt, set())
            return None
        if isinstance(stmt, ast.If):
            if self._tests_name(stmt.test):
                return None
            inert = self.is_inert(stmt.test)
            if not inert and not self.is_computable(stmt.test):
                return None
            body = self.block(stmt.body)
            orelse = self.block(stmt.orelse)
            # copy_location: end positions too, or compile() rejects the new node
            new = ast.copy_location(ast.If(test=stmt.test, body=body or [_pass(stmt)], orelse=orelse), stmt)
            return new if inert else self._guarded(new, set())
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            body = self.block(stmt.body)  # type: ignore[attr-defined]
            if not body:
                return None
            handlers = []
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                handlers.append(ast.copy_location(ast.ExceptHandler(
                    type=handler.type, name=handler.name, body=self.block(handler.body) or [_pass(handler)]),
                    handler))
            return ast.copy_location(type(stmt)(body=body, handlers=handlers,  # type: ignore[call-arg]
                                                orelse=self.block(stmt.orelse),  # type: ignore[attr-defined]
                                                finalbody=self.block(stmt.finalbody)),  # type: ignore[attr-defined]
                                     stmt)
        return None


def base_is_import(expr: ast.AST, imported: set[str]) -> bool:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in imported


# The last part of a qualified name that makes any call an effect (``AutoModel.from_pretrained``).
_EFFECT_SUFFIXES = frozenset({"from_pretrained", "load_state_dict", "download", "fit", "train", "parse_args"})


def _is_effect(qualified: str) -> bool:
    if qualified.rsplit(".", 1)[-1] in _EFFECT_SUFFIXES:
        return True
    return any(qualified == c or (c.endswith(".") and qualified.startswith(c)) or qualified.startswith(c + ".")
               for c in EFFECT_CALLS)


def _pass(at: ast.AST) -> ast.Pass:
    return ast.copy_location(ast.Pass(), at)


def definitions_only(tree: ast.Module) -> Sanitized:
    """The statements of ``tree`` that define things, as described above."""
    flt = _Filter(tree)
    flt.result.tree.body = flt.block(tree.body)
    # every node made here is given its statement's position (compile() needs them; a
    # fix_missing_locations pass over the whole tree would cost as much as the filter)
    for stmt in flt.result.tree.body:
        flt.result.kept_names |= _bound_names(stmt)
    flt.result.skipped_names -= flt.result.kept_names
    return flt.result


def _top_level(body: list[ast.stmt]):
    """Statements that bind at module level: the body and the blocks of kept if/try."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _top_level(stmt.body)
            yield from _top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            yield from _top_level(stmt.body)  # type: ignore[attr-defined]
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                yield from _top_level(handler.body)
            yield from _top_level(stmt.orelse)  # type: ignore[attr-defined]
            yield from _top_level(stmt.finalbody)  # type: ignore[attr-defined]


def _bound_names(stmt: ast.stmt) -> set[str]:
    """Names a kept top-level statement binds (for the statements after it)."""
    names: set[str] = set()
    for node in _top_level([stmt]):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names
