"""Entry points: the models a project's scripts really build (static, no torch).

Real scripts build their model from the command line: ``parser.add_argument(
"--arch", default="resnet18")`` then ``models.__dict__[args.arch]()``,
``get_network(args.network, depth=args.depth)``, ``eval(args.arch)(...)``,
``timm.create_model(args.model)``, in the module body, a ``main()`` function
or the ``if __name__ == "__main__":`` block, after a training set-up that
must never run.  For each assignment of such a construction to a name
(``net = ...``), this module plans a *slice*: the statements before it that
the construction needs (the parser and its ``add_argument`` calls, the
``args = parser.parse_args()``, dictionaries of defaults, ``if``/``else``
choosing a configuration, a YAML or JSON file opened by a constant path), in
their order, and nothing else (no data loading, no training loop, no
``torch.load``).  The worker runs that slice in a copy of the file's
namespace with ``parse_args`` answering the parser's defaults
(:mod:`hooklint.graph.build`), so the model is the one the script trains
when run without options.

Where an option selects the architecture (``choices=``, keys of the
dictionary of factories it indexes, in the script or in the factory it is
passed to), the other values are planned as *variants*, a few per entry.
Weights are never downloaded: ``pretrained=...`` becomes ``False`` and
``weights=...`` ``None`` in the construction (and in a string given to
``eval``), and the model says so.

The data code gives the example input's size where the model does not say
it: ``transforms.RandomCrop(32)``, ``Resize(224)``, a CIFAR or MNIST dataset
(:func:`data_hint`).
"""

from __future__ import annotations

import ast
import builtins
import copy
from dataclasses import dataclass
from typing import Any, Iterator

from hooklint.graph.sanitize import EFFECT_METHODS, UNSAFE_BUILTINS, _is_effect, import_aliases, qualified_name

MAX_ENTRIES = 6  # constructions per file
MAX_VARIANTS = 5  # other values of an architecture option, per construction
_BUILTINS = frozenset(dir(builtins))

# Keywords that load weights, and what they become.
WEIGHT_KEYWORDS = {"pretrained": False, "pretrained_backbone": False, "weights": None, "weights_backbone": None,
                   "pretrained_cfg_overlay": None, "checkpoint_path": ""}
# Methods returning the module itself (the construction is the call before them).
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "eval", "train", "float", "double", "half", "bfloat16",
                           "requires_grad_", "share_memory"})
# Wrappers whose `.module` is the model.
_WRAPPERS = frozenset({"DataParallel", "DistributedDataParallel"})
# Library calls that build a model without weights (the zoo).
_ZOO_PREFIXES = ("torchvision.models.", "timm.create_model", "timm.models.", "transformers.AutoModel",
                 "transformers.models.", "segmentation_models_pytorch.", "pretrainedmodels.",
                 "pytorchcv.model_provider.get_model")
# Allowed reads of configuration files, and the parser API.
_ALLOWED_EFFECTS = ("json.load", "json.loads", "yaml.load", "yaml.safe_load", "yaml.full_load", "yaml.unsafe_load",
                    "toml.load", "tomllib.load", "argparse.ArgumentParser")
_PARSE_METHODS = frozenset({"parse_args", "parse_known_args"})
# Names of things that are never models (losses, optimizers, loaders...).
_NOT_MODELS = ("torch.optim.", "torch.utils.data.", "torchvision.datasets.", "torchvision.transforms.",
               "torch.nn.CrossEntropyLoss", "torch.nn.MSELoss", "torch.nn.NLLLoss", "torch.device",
               "argparse.", "logging.", "os.", "sys.", "numpy.", "torch.utils.tensorboard.", "tensorboardX.",
               "torch.cuda.", "time.", "json.", "yaml.", "open", "builtins.")


@dataclass(frozen=True)
class EntryConstruction:
    """One model a script builds, and the statements that build it."""

    binding: str  # the name the model is bound to ("net")
    line: int  # the statement binding it
    scope: str  # "<module>", or the function it is in ("main")
    program: ast.Module  # the slice; its last statement binds `binding`
    text: str  # the construction as written (shortened)
    options: tuple[tuple[str, Any], ...]  # command-line options it reads, with their defaults
    # other option values to build too: ((option, value), ...) per variant, and where each was read
    variants: tuple[tuple[tuple[tuple[str, Any], ...], str], ...]
    weights: tuple[str, ...]  # keyword rewrites ("pretrained=True -> False")
    parser: str  # "argparse", "click", "typer", "defaults" (function defaults), or ""
    data: tuple[tuple[int, ...], str] | None = None  # example input size from the data code, and why
    sinks: tuple[int, ...] = ()  # lines of the calls the model is passed to (for linking)
    # options that select the architecture whose other values hooklint cannot list (a free
    # string given to a registry or a factory it does not read): only their default is built
    open_options: tuple[str, ...] = ()
    variants_capped: bool = False  # more configurations were found than MAX_VARIANTS

    def describe(self, variant: tuple[tuple[tuple[str, Any], ...], str] | None = None) -> str:
        where = "" if self.scope == "<module>" else f" in {self.scope}()"
        values = dict(self.options)
        shown = ", ".join(f"--{k}={v!r}" for k, v in list(values.items())[:4])
        if len(values) > 4:
            shown += ", ..."
        how = {"argparse": "argparse defaults", "click": "click defaults", "typer": "typer defaults",
               "defaults": "its parameters' defaults"}.get(self.parser, "")
        if variant is not None:
            options, origin = variant
            set_here = " ".join(f"--{k}={v!r}" for k, v in options[:4]) + (" ..." if len(options) > 4 else "")
            how = f"{set_here} ({origin}), other options at their defaults"
        text = f"`{self.binding} = {self.text}`"
        details = where.strip()
        if how and variant is None and shown:
            details += ("; " if details else "") + f"{how}: {shown}"
        elif how:
            details += ("; " if details else "") + how
        text += f" ({details})" if details else ""
        if self.weights:
            text += f", without weights ({', '.join(self.weights)})"
        return text


@dataclass
class _Scope:
    """A block of statements a construction can be sliced in."""

    name: str  # "<module>" or a function's name
    function: ast.FunctionDef | ast.AsyncFunctionDef | None
    statements: list[ast.stmt]


class EntryPlanner:
    """Entry constructions of one file."""

    def __init__(self, tree: ast.Module, kept_names: set[str], is_model_callee, hooks_involved,
                 callee_keys=None) -> None:
        """``is_model_callee(call) -> bool``: the call can build a module (a class
        or factory of the project, a zoo constructor); ``hooks_involved(binding,
        uses, call) -> bool``: building it teaches the rules something;
        ``callee_keys(call, position, keyword) -> list``: the keys of the
        dictionary of factories the called function indexes with that argument."""
        self.callee_keys = callee_keys
        self.commands: list[tuple[tuple[tuple[str, Any], ...], str]] = []  # documented command lines
        self.method_calls: Any = None  # names of the methods the file calls, when the caller knows them
        self.tree = tree
        self.kept = kept_names
        self.aliases = import_aliases(tree)
        self.is_model_callee = is_model_callee
        self.hooks_involved = hooks_involved
        self._argparse: dict[str, tuple[ast.expr | None, ast.Call]] | None = None

    # ------------------------------------------------------------ candidates

    def entries(self, skip_lines: set[int]) -> list[EntryConstruction]:
        out: list[EntryConstruction] = []
        for scope in self._scopes():
            for index, stmt, path in _assignments(scope.statements):
                if stmt.lineno in skip_lines or len(out) >= MAX_ENTRIES:
                    continue
                names = _target_names(stmt)
                if not names:
                    continue
                value = stmt.value  # type: ignore[union-attr]
                construction = _construction(value)
                if construction is None or not self._model_like(construction):
                    continue
                # `(image, ..., model) = get_example_params(0)`: the name handed to hooking code
                target = None
                for name in names:
                    found = _uses_after(scope.statements, stmt, name)
                    if found and self.hooks_involved(name, found, construction):
                        target, _uses = name, found
                        break
                if target is None:
                    continue
                planned = self._plan(scope, stmt, target, construction, path)
                if planned is not None:
                    out.append(planned)
        return out

    def _scopes(self) -> Iterator[_Scope]:
        """The module body and its functions, for a file that runs as a script (a
        library module's functions build models for their callers: they are not
        entry points, and planning each of them would cost on every library file)."""
        if not is_script(self.tree, self.method_calls):
            return
        yield _Scope("<module>", None, self.tree.body)
        for node in _module_level_defs(self.tree.body):
            yield _Scope(node.name, node, node.body)

    def _model_like(self, call: ast.Call) -> bool:
        func = call.func
        qual = qualified_name(func, self.aliases) if isinstance(func, (ast.Name, ast.Attribute)) else None
        if qual is not None and (qual.startswith(_NOT_MODELS) or qual in _BUILTINS and qual != "eval"):
            return False
        if qual is not None and qual.startswith(_ZOO_PREFIXES):
            return "from_pretrained" not in qual
        if _is_eval(call) and call.args and isinstance(call.args[0], ast.Constant) and "(" not in str(
                call.args[0].value):
            return False  # `eval("net.relu")`: a part of a model, not a construction
        if _dynamic_lookup(func) or _is_eval(call):
            return True
        return bool(self.is_model_callee(call))

    # ------------------------------------------------------------ the slice

    def _plan(self, scope: _Scope, stmt: ast.stmt, target: str, construction: ast.Call,
              path: list[tuple[list[ast.stmt], int]]) -> EntryConstruction | None:
        rewritten, weights = _without_weights(construction)
        weights += _weights_in_eval_strings(construction)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]  # type: ignore[attr-defined]
        final = ast.copy_location(ast.Assign(targets=[_copy_ast(t) for t in targets], value=rewritten), stmt)
        needed = _reads(rewritten) - self.kept - _BUILTINS
        units: list[ast.stmt] = []
        for block, index in path:
            units += block[:index]
        reads: dict[str, set[str] | None] = {}
        _attribute_reads(rewritten, reads)
        sliced, needed = _slice(units, needed, reads)
        needed -= self.kept | _BUILTINS  # imports and definitions the worker already ran
        prologue: list[ast.stmt] = []
        parser_kind = ""
        if scope.function is not None:
            params, parser_kind = self._parameter_defaults(scope.function)
            for name in sorted(needed & set(params)):
                prologue.append(ast.copy_location(ast.Assign(targets=[ast.Name(name, ast.Store())],
                                                             value=params[name]), scope.function))
            needed -= set(params)
            if needed:  # module-level state the function reads (`args` parsed at the top)
                module_units = [s for s in self.tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                                  ast.ClassDef))]
                module_units = [s for s in module_units if not _tests_main(s)]
                module_slice, needed = _slice(module_units, needed)
                prologue = module_slice + prologue
        needed -= self.kept | _BUILTINS
        if needed and self._star_import():
            needed -= {n for n in needed if n not in self._stored_names()}  # names a `from x import *` brings
        if needed:
            return None  # the construction reads something no statement before it sets
        program_body = prologue + sliced + [final]
        if not all(self._safe(s) for s in program_body[:-1]) or not self._safe_construction(rewritten):
            return None
        # the statements as they are (the planner's tree is not changed); a statement calling
        # `eval` is copied before it is rewritten
        program = ast.fix_missing_locations(ast.Module(body=[_eval_rewritten(s) for s in program_body],
                                                       type_ignores=[]))
        options = self._options_read(program)
        if options and not parser_kind:
            parser_kind = "argparse"
        text = ast.unparse(construction)
        variants, open_options = self._variants(program, options, stmt)
        return EntryConstruction(
            binding=target, line=stmt.lineno, scope=scope.name, program=program,
            text=text if len(text) <= 100 else text[:97] + "...",
            options=tuple(options.items()), variants=tuple(variants[:MAX_VARIANTS]),
            open_options=tuple(sorted(open_options)), variants_capped=len(variants) > MAX_VARIANTS,
            weights=tuple(weights), parser=parser_kind, data=data_hint(self.tree, self._argparse_defaults()),
            sinks=tuple(sorted({u.lineno for u in _uses_after(scope.statements, stmt, target)})))

    def _star_import(self) -> bool:
        return any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in self.tree.body)

    def _stored_names(self) -> set[str]:
        if not hasattr(self, "_stored"):
            self._stored = {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name)
                            and isinstance(n.ctx, ast.Store)} | {n.name for n in ast.walk(self.tree) if isinstance(
                                n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        return self._stored

    def _parameter_defaults(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[dict[str, ast.expr], str]:
        """Values for a function's parameters: click/typer option defaults, else the
        signature's defaults."""
        out: dict[str, ast.expr] = {}
        kind = ""
        args = function.args
        positional = args.posonlyargs + args.args
        for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
            out[arg.arg] = _typer_default(default)
            kind = "typer" if _is_typer(default) else kind or "defaults"
        for arg, default in zip(args.kwonlyargs, args.kw_defaults):
            if default is not None:
                out[arg.arg] = _typer_default(default)
        for decorator in function.decorator_list:
            if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                    and decorator.func.attr in ("option", "argument")):
                continue
            names = [a.value for a in decorator.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            keywords = {k.arg: k.value for k in decorator.keywords if k.arg}
            dest = next((n for n in names if not n.startswith("-")), None) or next(
                (n.lstrip("-").split("/")[0] for n in names if n.startswith("--")), None)
            if dest is None:
                continue
            dest = dest.replace("-", "_")
            value = keywords.get("default")
            if value is None:
                choice = keywords.get("type")
                if isinstance(choice, ast.Call) and getattr(choice.func, "attr", "") == "Choice" and choice.args \
                        and isinstance(choice.args[0], (ast.List, ast.Tuple)) and choice.args[0].elts:
                    value = choice.args[0].elts[0]
            if value is not None:
                out[dest] = value
                kind = "click"
        return out, kind

    # ------------------------------------------------------------ safety

    def _safe(self, stmt: ast.stmt) -> bool:
        """Runs nothing but configuration: no effect call (``torch.load``, a data
        loader, a download), no loop over data, no file written."""
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Global, ast.Nonlocal, ast.Delete, ast.Await, ast.Yield, ast.YieldFrom)):
                return False
            if isinstance(node, (ast.For, ast.While, ast.AsyncFor)) and not _small_loop(node):
                return False
            if isinstance(node, (ast.With, ast.AsyncWith)) and not all(_reads_file(i.context_expr)
                                                                       for i in node.items):
                return False
            if isinstance(node, ast.Call) and not self._safe_call(node):
                return False
        return True

    def _safe_construction(self, call: ast.Call) -> bool:
        """The construction itself runs the project's code (that is the model);
        its arguments must not load or run anything else."""
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            if not all(self._safe_call(n) for n in ast.walk(arg) if isinstance(n, ast.Call)):
                return False
        return True

    def _safe_call(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Name) and func.id in _BUILTINS and func.id not in self.kept:
            if func.id == "open":
                return _reads_file(call)
            return func.id not in UNSAFE_BUILTINS or func.id == "eval"
        if isinstance(func, ast.Name) and func.id in self.kept and func.id not in self.aliases \
                and func.id in _PARSE_METHODS:
            return True  # the script's own `def parse_args(): ...` (the parser answers its defaults)
        qual = qualified_name(func, self.aliases) if isinstance(func, (ast.Name, ast.Attribute)) else None
        if qual is not None and qual.startswith(_ALLOWED_EFFECTS):
            return True
        head = func
        while isinstance(head, ast.Attribute):
            head = head.value
        if isinstance(head, ast.Name) and head.id in self.aliases and isinstance(func, ast.Attribute):
            # a function of an imported module (`re.compile`, `os.path.join`): judged by its name
            return qual is None or not (_is_effect(qual) or qual.startswith(
                ("torchvision.datasets", "torch.utils.data", "torch.distributed")))
        if isinstance(func, ast.Attribute):
            if func.attr in _PARSE_METHODS or func.attr in ("add_argument", "add_argument_group",
                                                            "set_defaults", "add_mutually_exclusive_group"):
                return True
            if func.attr in EFFECT_METHODS:
                return False
        if qual is not None and _is_effect(qual):
            return False
        if qual is not None and qual.startswith(("torchvision.datasets", "torch.utils.data", "torch.distributed")):
            return False
        return True

    # ------------------------------------------------------------ options

    def _argparse_defaults(self) -> dict[str, tuple[ast.expr | None, ast.Call]]:
        """dest -> (default expression, the add_argument call) for the file's parsers."""
        if self._argparse is None:
            self._argparse = {}
            for node in ast.walk(self.tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "add_argument"):
                    continue
                dest = argparse_dest(node)
                if dest is None:
                    continue
                keywords = {k.arg: k.value for k in node.keywords if k.arg}
                default = keywords.get("default")
                action = keywords.get("action")
                if default is None and isinstance(action, ast.Constant) and action.value in ("store_true",
                                                                                            "store_false"):
                    default = ast.Constant(action.value == "store_false")
                self._argparse.setdefault(dest, (default, node))
        return self._argparse

    def _options_read(self, program: ast.Module) -> dict[str, Any]:
        """Options of the parsers the slice reads (``args.arch``), with their defaults."""
        known = self._argparse_defaults()
        out: dict[str, Any] = {}
        for node in ast.walk(program):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in known:
                default = known[node.attr][0]
                out[node.attr] = _literal(default) if default is not None else None
        return out

    def _variants(self, program: ast.Module, options: dict[str, Any], stmt: ast.stmt
                  ) -> tuple[list[tuple[tuple[tuple[str, Any], ...], str]], set[str]]:
        """Other configurations to build: the project's documented command lines
        for this script first (what it really runs), then the other values of
        the options that select the architecture (``choices=``, keys of a
        dictionary of factories)."""
        known = self._argparse_defaults()
        out: list[tuple[tuple[tuple[str, Any], ...], str]] = []
        seen: set[tuple[tuple[str, Any], ...]] = set()
        selecting: dict[str, list[Any]] = {}
        open_options: set[str] = set()
        for dest, default in options.items():
            call = known[dest][1]
            keywords = {k.arg: k.value for k in call.keywords if k.arg}
            values: list[Any] = []
            choices = keywords.get("choices")
            if choices is not None:
                literal = _literal(choices)
                if isinstance(literal, (list, tuple, set)):
                    values = [v for v in literal if isinstance(v, (str, int))]
            if not values and _selects_code(program, dest):
                values = self._keys_it_indexes(program, dest)
            if not values and self.callee_keys is not None:
                values = self._callee_values(program, dest)
            if values:
                selecting[dest] = [v for v in values if v != default]
            elif _selects_code(program, dest) and isinstance(default, str):
                open_options.add(dest)
        for command, origin in self.commands:
            relevant = tuple((k, v) for k, v in command if k in options)
            if relevant and relevant not in seen and any(options.get(k) != v for k, v in relevant):
                seen.add(relevant)
                out.append((relevant, origin))
        for dest, values in selecting.items():
            for value in values:
                if any(dict(v).get(dest) == value for v, _ in out):
                    continue  # a documented command builds it (with the options it needs)
                out.append((((dest, value),), "choices" if _has_choices(known[dest][1]) else
                            "an architecture the code it is given to selects"))
        return out, open_options

    def _callee_values(self, program: ast.Module, dest: str) -> list[Any]:
        for node in ast.walk(program):
            if not isinstance(node, ast.Call):
                continue
            for position, arg in enumerate(node.args):
                if _is_option(arg, dest):
                    found = self.callee_keys(node, position, None)
                    if found:
                        return found
            for keyword in node.keywords:
                if keyword.arg and _is_option(keyword.value, dest):
                    found = self.callee_keys(node, None, keyword.arg)
                    if found:
                        return found
        return []

    def _keys_it_indexes(self, program: ast.Module, dest: str) -> list[Any]:
        """Keys of a dictionary of factories of the file that ``args.<dest>`` indexes."""
        for node in ast.walk(program):
            if isinstance(node, ast.Subscript) and _is_option(node.slice, dest) and isinstance(node.value, ast.Name):
                found = _module_dict(self.tree, node.value.id) or _dict_in(program, node.value.id)
                if found is not None:
                    return factory_keys(found)
        return []


# ---------------------------------------------------------------- helpers


def argparse_dest(call: ast.Call) -> str | None:
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    for keyword in call.keywords:
        if keyword.arg == "dest" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    longs = [n for n in names if n.startswith("--")]
    plain = [n for n in names if not n.startswith("-")]
    option = longs[0][2:] if longs else plain[0] if plain else None
    if option is None:
        shorts = [n for n in names if n.startswith("-")]
        option = shorts[0][1:] if shorts else None
    return option.replace("-", "_") if option else None


def _literal(expr: ast.AST | None) -> Any:
    if expr is None:
        return None
    try:
        return ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ast.unparse(expr)


def _assignments(body: list[ast.stmt], path: list[tuple[list[ast.stmt], int]] | None = None
                 ) -> Iterator[tuple[int, ast.stmt, list[tuple[list[ast.stmt], int]]]]:
    """Assignments in a block and in its if/try/with blocks (the `__main__` block
    included), with the chain of (block, index) leading to each."""
    path = path or []
    for index, stmt in enumerate(body):
        here = path + [(body, index)]
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            yield index, stmt, here
        elif isinstance(stmt, ast.If):
            yield from _assignments(stmt.body, here)
            yield from _assignments(stmt.orelse, here)
        elif isinstance(stmt, (ast.Try, ast.With)) or type(stmt).__name__ == "TryStar":
            yield from _assignments(stmt.body, here)  # type: ignore[attr-defined]


_CLI_DECORATORS = frozenset({"command", "group", "option", "argument", "main"})
# Top-level calls a library module makes at import time (not a script running).
_LIBRARY_CALL_HEADS = frozenset({"warnings", "logging", "_logger", "logger", "log", "torch", "os", "sys", "typing",
                                 "__all__", "jit", "fx"})
_LIBRARY_MODULE_CALLS = frozenset({"append", "extend", "update", "setdefault", "warn", "filterwarnings",
                                   "simplefilter", "wrap", "setLevel", "addHandler", "basicConfig", "setattr",
                                   "register"})


def is_script(tree: ast.Module, method_calls: Any = None) -> bool:
    """The file runs as a program: a ``__main__`` block, an argparse parser, a
    click or typer command, or statements at its top level that do something (a
    call, a loop, a ``with``), as a script without a ``__main__`` block has."""
    for stmt in tree.body:
        if _tests_main(stmt):
            return True
        if isinstance(stmt, (ast.For, ast.While, ast.With)):
            return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            head = func
            while isinstance(head, ast.Attribute):
                head = head.value
            library = isinstance(head, ast.Name) and head.id in _LIBRARY_CALL_HEADS
            if not library and name not in _LIBRARY_MODULE_CALLS and not name.startswith(("register", "_register")):
                return True
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                (d.func.attr if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) else
                 d.attr if isinstance(d, ast.Attribute) else "") in _CLI_DECORATORS for d in stmt.decorator_list):
            return True
    if method_calls is not None:  # the semantic model's index of method calls: no walk
        return any(name in method_calls for name in _PARSE_METHODS)
    return any(isinstance(n, ast.Attribute) and n.attr in _PARSE_METHODS for n in ast.walk(tree))


def _module_level_defs(body: list[ast.stmt]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield stmt
        elif isinstance(stmt, ast.If):
            yield from _module_level_defs(stmt.body)
            yield from _module_level_defs(stmt.orelse)


def _target_names(stmt: ast.stmt) -> list[str]:
    """``net`` for ``net = ...``; each name of ``a, b, model = ...``."""
    single = _single_target(stmt)
    if single is not None:
        return [single]
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], (ast.Tuple, ast.List)):
        elts = stmt.targets[0].elts
        if all(isinstance(e, ast.Name) for e in elts):
            return [e.id for e in reversed(elts)]  # (a model is usually last)
    return []


def _single_target(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id
    return None


def _construction(value: ast.AST | None) -> ast.Call | None:
    """The call that builds the model: ``Net(...).to(device).eval()`` -> ``Net(...)``."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
            and value.func.attr in _RETURNS_SELF and isinstance(value.func.value, ast.Call):
        value = value.func.value
    return value if isinstance(value, ast.Call) else None


def _dynamic_lookup(func: ast.AST) -> bool:
    """``models.__dict__[args.arch]``, ``MODELS[name]``, ``getattr(models, args.arch)``."""
    if isinstance(func, ast.Subscript):
        return True
    return isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id in ("getattr", "eval")


def _is_eval(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id == "eval"


def _uses_after(statements: list[ast.stmt], stmt: ast.stmt, name: str) -> list[ast.AST]:
    """Loads of ``name`` after ``stmt`` in the scope (its own statements and nested blocks)."""
    out = []
    for node in ast.walk(ast.Module(body=statements, type_ignores=[])):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) \
                and getattr(node, "lineno", 0) > stmt.lineno:
            out.append(node)
    return out


def _tests_main(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and any(isinstance(n, ast.Name) and n.id == "__name__"
                                           for n in ast.walk(stmt.test))


def _reads(node: ast.AST) -> set[str]:
    """Free names an expression or statement reads (comprehension variables excluded)."""
    bound: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for gen in sub.generators:
                bound |= {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        elif isinstance(sub, ast.Lambda):
            bound |= {a.arg for a in sub.args.args}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def _binds(stmt: ast.stmt) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            out |= {n.id for n in ast.walk(node.optional_vars) if isinstance(n, ast.Name)}
    return out


def _mutates(stmt: ast.stmt) -> set[str]:
    """Names whose object a statement changes: ``parser.add_argument(...)``,
    ``args.depth = 20``, ``cfg["x"] = 1``, ``cfg.merge_from_file(path)``."""
    out: set[str] = set()
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute):
        base = stmt.value.func.value
        while isinstance(base, (ast.Attribute, ast.Subscript)):
            base = base.value
        if isinstance(base, ast.Name):
            out.add(base.id)
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
        stmt, (ast.AugAssign, ast.AnnAssign)) else []
    for target in targets:
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            base = target
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                out.add(base.id)
    return out


def _copy_ast(node: Any) -> Any:
    """A copy of an AST's fields (``copy.deepcopy`` would follow the semantic
    model's parent links and copy the whole file)."""
    if isinstance(node, list):
        return [_copy_ast(item) for item in node]
    if not isinstance(node, ast.AST):
        return node
    new = type(node)(**{name: _copy_ast(getattr(node, name)) for name in node._fields if hasattr(node, name)})
    # positions, and the semantic model's scope and parent by reference (lookups of names still work)
    for attr in ("lineno", "col_offset", "end_lineno", "end_col_offset", "_hl_scope", "_hl_parent"):
        if hasattr(node, attr):
            setattr(new, attr, getattr(node, attr))
    return new


_COMPOUND = (ast.If, ast.Try, ast.With, ast.For, ast.While)
# Methods a script calls on its model that change neither its modules nor its forward.
_STATE_METHODS = frozenset({"cuda", "to", "cpu", "eval", "train", "half", "float", "double", "bfloat16",
                            "load_state_dict", "zero_grad", "share_memory", "requires_grad_", "print", "summary"})


def _moved_to_device(stmt: ast.stmt) -> bool:
    """``net = net.to(device)``, ``model = model.cuda()``: the same module."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return False
    value = stmt.value
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
        and value.func.attr in _STATE_METHODS and isinstance(value.func.value, ast.Name) \
        and value.func.value.id == stmt.targets[0].id


def _device_or_state_call(stmt: ast.stmt) -> bool:
    """``model.cuda()``, ``model.eval()``, ``model.load_state_dict(...)``: not needed
    to build the model (and a device or a checkpoint hooklint does not have)."""
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
        and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr in _STATE_METHODS


def _attribute_reads(node: ast.AST, reads: dict[str, set[str] | None]) -> None:
    """Per name, the attributes read from it (None: the name is read as a whole)."""
    attribute_bases = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and isinstance(sub.ctx, ast.Load):
            attribute_bases.add(id(sub.value))
            if reads.get(sub.value.id, set()) is not None:
                reads.setdefault(sub.value.id, set()).add(sub.attr)  # type: ignore[union-attr]
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and id(sub) not in attribute_bases:
            reads[sub.id] = None


def _only_unread_attributes(unit: ast.stmt, reads: dict[str, set[str] | None]) -> bool:
    """``args.base_lr = ...`` when what is built reads only ``args.model``."""
    if not isinstance(unit, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        return False
    targets = unit.targets if isinstance(unit, ast.Assign) else [unit.target]
    for target in targets:
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
            return False
        read = reads.get(target.value.id, set())
        if read is None or target.attr in read:
            return False
    return True


def _slice(units: list[ast.stmt], needed: set[str],
           reads: dict[str, set[str] | None] | None = None) -> tuple[list[ast.stmt], set[str]]:
    """The statements of ``units`` (in order) that set or change what ``needed``
    names, transitively; and the names still unset before them.  ``reads``: the
    attributes read so far from each name (a store into an attribute nothing reads
    is left out)."""
    selected: list[ast.stmt] = []
    needed = set(needed)
    reads = reads if reads is not None else {}
    for unit in reversed(units):
        if _tests_main(unit) and not (_binds(unit) & needed):
            continue
        binds = _binds(unit) if not isinstance(unit, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
            else {unit.name}  # type: ignore[attr-defined]
        mutates = _mutates(unit)
        if not (binds & needed or mutates & needed) or _device_or_state_call(unit) or _moved_to_device(unit):
            continue
        if not binds & needed and _only_unread_attributes(unit, reads):
            continue
        if isinstance(unit, _COMPOUND) or type(unit).__name__ == "TryStar":
            filtered = _filter_compound(unit, needed, reads)
            if filtered is None:
                continue
            selected.insert(0, filtered)
            _attribute_reads(filtered, reads)
            # conditionally bound names may still need an earlier value; names the block binds for
            # itself (a loop variable, a temporary) are its own
            needed -= _definitely_binds(unit)
            needed |= _reads(filtered) - _binds(filtered)
            continue
        selected.insert(0, unit)
        _attribute_reads(unit, reads)
        if isinstance(unit, (ast.Assign, ast.AnnAssign)) and not mutates:
            needed -= binds
        elif isinstance(unit, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            needed -= binds
        if isinstance(unit, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue  # its body reads names when called, at which point they are set (or it fails)
        needed |= _reads(unit)
    return selected, needed


def _definitely_binds(stmt: ast.stmt) -> set[str]:
    """Names every way through an if/try/with block binds."""
    def block(body: list[ast.stmt]) -> set[str]:
        out: set[str] = set()
        for sub in body:
            if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom, ast.FunctionDef,
                                ast.AsyncFunctionDef, ast.ClassDef)):
                out |= _binds(sub)
            elif isinstance(sub, (ast.If, ast.Try, ast.With)):
                out |= _definitely_binds(sub)
        return out

    if isinstance(stmt, ast.If):
        return block(stmt.body) & block(stmt.orelse) if stmt.orelse else set()
    if isinstance(stmt, (ast.Try, ast.With)):
        return block(stmt.body)
    return set()


def _filter_compound(stmt: ast.stmt, needed: set[str], reads: dict[str, set[str] | None] | None = None
                     ) -> ast.stmt | None:
    """A copy of an if/try/with/for block keeping what sets ``needed``."""
    new = copy.copy(stmt)
    for field_name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, field_name, None)
        if block:
            kept, _ = _slice(block, needed, dict(reads or {}))
            setattr(new, field_name, kept or [ast.copy_location(ast.Pass(), stmt)])
    if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
        handlers = []
        for handler in stmt.handlers:  # type: ignore[attr-defined]
            h = copy.copy(handler)
            kept, _ = _slice(handler.body, needed)
            h.body = kept or [ast.copy_location(ast.Pass(), handler)]
            handlers.append(h)
        new.handlers = handlers  # type: ignore[attr-defined]
    if isinstance(stmt, (ast.For, ast.While)) and not _small_loop(stmt):
        return None
    return new


def _small_loop(loop: ast.AST) -> bool:
    """A loop that computes configuration (over a literal, a range or a string
    split), not over data."""
    if isinstance(loop, ast.While):
        return False
    iterable = loop.iter  # type: ignore[attr-defined]
    if isinstance(iterable, (ast.List, ast.Tuple, ast.Set, ast.Constant, ast.Name)):
        return True
    if isinstance(iterable, ast.Call):
        func = iterable.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in ("range", "enumerate", "zip", "split", "items", "keys", "values", "sorted", "reversed",
                        "findall", "list")
    return False


def _reads_file(expr: ast.AST) -> bool:
    """``open(path)`` or ``open(path, "r")``: reading a configuration file."""
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "open"):
        return False
    mode = expr.args[1] if len(expr.args) > 1 else next((k.value for k in expr.keywords if k.arg == "mode"), None)
    return mode is None or (isinstance(mode, ast.Constant) and isinstance(mode.value, str)
                            and set(mode.value) <= {"r", "t", "b"})


def _without_weights(call: ast.Call) -> tuple[ast.Call, list[str]]:
    """The construction with weight-loading keywords turned off."""
    new = _copy_ast(call)
    changed: list[str] = []
    for keyword in new.keywords:
        if keyword.arg in WEIGHT_KEYWORDS:
            off = WEIGHT_KEYWORDS[keyword.arg]
            if isinstance(keyword.value, ast.Constant) and keyword.value.value == off:
                continue
            changed.append(f"{keyword.arg}={ast.unparse(keyword.value)} -> {off!r}")
            keyword.value = ast.copy_location(ast.Constant(off), keyword.value)
    return new, changed


def _weights_in_eval_strings(call: ast.Call) -> list[str]:
    """``eval("hubconf.{}(pretrained=True)".format(...))``: the evaluated text loads
    weights; the worker turns the keyword off there."""
    out = []
    for node in ast.walk(call):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for keyword, off in WEIGHT_KEYWORDS.items():
                if f"{keyword}=" in node.value and f"{keyword}={off!r}" not in node.value:
                    out.append(f"{keyword}=... in the evaluated string -> {off!r}")
    return out


EVAL_HELPER = "__hooklint_eval__"


def _eval_rewritten(stmt: ast.stmt) -> ast.stmt:
    """``eval(x)`` -> ``__hooklint_eval__(x)`` in a copy: the worker evaluates only a
    dotted name or a call of one with literal arguments, weights turned off."""
    calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == "eval"]
    if not calls:
        return stmt
    stmt = _copy_ast(stmt)
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "eval":
            node.func.id = EVAL_HELPER
    return stmt


def _is_option(expr: ast.AST, dest: str) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr == dest


def _selects_code(program: ast.Module, dest: str) -> bool:
    """``args.<dest>`` picks a function or class: it indexes something, is given
    to ``eval``/``getattr``, or is the first argument of a project factory."""
    for node in ast.walk(program):
        if isinstance(node, ast.Subscript) and _is_option(node.slice, dest):
            return True
        if isinstance(node, ast.Call) and any(_is_option(a, dest) for a in node.args[:2]):
            return True
    return False


def _has_choices(call: ast.Call) -> bool:
    return any(k.arg == "choices" for k in call.keywords)


def option_strings(tree: ast.Module) -> dict[str, str]:
    """``"--arch"``, ``"-a"`` -> dest, for the file's argparse options."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            dest = argparse_dest(node)
            if dest is None:
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"):
                    out[arg.value] = dest
    return out


def documented_commands(script: str, texts: list[tuple[str, str]], options: dict[str, str]
                        ) -> list[tuple[tuple[tuple[str, Any], ...], str]]:
    """Command lines running ``script`` in the project's READMEs and shell
    scripts (``texts``: (display name, text)), as the options they set (only
    options the script's parser defines), each with where it was read."""
    import re
    import shlex

    out: list[tuple[tuple[tuple[str, Any], ...], str]] = []
    pattern = re.compile(rf"(?:^|[\s/]){re.escape(script)}(?=\s|$)")
    for name, text in texts:
        joined = re.sub(r"\\\s*\n", " ", text)
        for number, line in enumerate(joined.splitlines(), 1):
            match = pattern.search(line)
            if match is None or "python" not in line[:match.start()]:
                continue
            rest = re.split(r"\s(?:\||&&|;|>|2>)\s?", line[match.end():])[0]
            try:
                tokens = shlex.split(rest)
            except ValueError:
                continue
            found: list[tuple[str, Any]] = []
            i = 0
            while i < len(tokens):
                token = tokens[i]
                value: Any = True
                if token.startswith("-") and "=" in token:
                    token, value = token.split("=", 1)
                elif token.startswith("-") and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                    value = tokens[i + 1]
                    i += 1
                i += 1
                dest = options.get(token)
                if dest is not None and not (isinstance(value, str) and (
                        any(c in value for c in "<[{$") or "/path/to" in value.lower())):
                    found.append((dest, value))
            if found:
                out.append((tuple(found), f"{name}:{number}"))
    return out


def factory_keys(found: ast.Dict) -> list[Any]:
    """The keys of a dictionary whose values are classes or functions (names),
    not of one of plain values (``{"cifar10": 10}`` selects no code)."""
    if not found.values or not all(isinstance(v, (ast.Name, ast.Attribute, ast.Lambda)) for v in found.values):
        return []
    return [k.value for k in found.keys if isinstance(k, ast.Constant) and isinstance(k.value, (str, int))]


def keys_indexed_by(function: ast.FunctionDef | ast.AsyncFunctionDef, param: str, tree: ast.Module) -> list[Any]:
    """Keys of the dictionary of factories ``function`` indexes with ``param``
    (``networks[network](**kwargs)`` with ``networks = {"vgg16_bn": vgg16_bn, ...}``)."""
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) and node.slice.id == param \
                and isinstance(node.value, ast.Name):
            found = _dict_in(ast.Module(body=function.body, type_ignores=[]), node.value.id) or \
                _module_dict(tree, node.value.id)
            if found is not None:
                return factory_keys(found)
    # `if model.lower() == "resnet20": ... elif model == "resnet32": ...` choosing what to build
    values: list[Any] = []
    for node in ast.walk(function):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1):
            continue
        subject, other = node.test.left, node.test.comparators[0]
        while isinstance(subject, ast.Call) and isinstance(subject.func, ast.Attribute) \
                and subject.func.attr in ("lower", "upper", "strip", "casefold"):
            subject = subject.func.value
        if not (isinstance(subject, ast.Name) and subject.id == param):
            continue
        if isinstance(node.test.ops[0], ast.Eq) and isinstance(other, ast.Constant) and isinstance(other.value, str):
            values.append(other.value)
        elif isinstance(node.test.ops[0], ast.In) and isinstance(other, (ast.Tuple, ast.List, ast.Set)):
            values += [e.value for e in other.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return list(dict.fromkeys(values))


def _module_dict(tree: ast.Module, name: str) -> ast.Dict | None:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and stmt.targets[0].id == name and isinstance(stmt.value, ast.Dict):
            return stmt.value
    return None


def _dict_in(program: ast.Module, name: str) -> ast.Dict | None:
    for node in ast.walk(program):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id == name and isinstance(node.value, ast.Dict):
            return node.value
    return None


def _is_typer(default: ast.AST) -> bool:
    return isinstance(default, ast.Call) and getattr(default.func, "attr", getattr(default.func, "id", "")) in (
        "Option", "Argument")


def _typer_default(default: ast.expr) -> ast.expr:
    """``typer.Option("resnet18", help=...)`` -> ``"resnet18"``."""
    if _is_typer(default):
        call = default  # type: ignore[assignment]
        first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "default"), None)  # type: ignore[attr-defined]
        if first is not None and not (isinstance(first, ast.Constant) and first.value is Ellipsis):
            return first
        return ast.copy_location(ast.Constant(None), default)
    return default


# ---------------------------------------------------------------- data hints

_DATASETS = {"cifar10": (3, 32, 32), "cifar100": (3, 32, 32), "cifar": (3, 32, 32), "svhn": (3, 32, 32),
             "mnist": (1, 28, 28), "fashionmnist": (1, 28, 28), "kmnist": (1, 28, 28), "emnist": (1, 28, 28),
             "stl10": (3, 96, 96), "tinyimagenet": (3, 64, 64), "tiny_imagenet": (3, 64, 64),
             "imagenet": (3, 224, 224), "imagenet1k": (3, 224, 224), "ilsvrc": (3, 224, 224)}
_SIZE_TRANSFORMS = ("RandomCrop", "CenterCrop", "Resize", "RandomResizedCrop")
_SIZE_OPTIONS = ("img_size", "image_size", "input_size", "imsize", "crop_size", "resolution", "size")


def data_hint(tree: ast.Module, options: dict[str, tuple[ast.expr | None, ast.Call]] | None = None
              ) -> tuple[tuple[int, ...], str] | None:
    """The input size the script's data code feeds, when it shows one:
    ``(C, H, W)`` from a dataset name (``CIFAR10`` -> 3x32x32) or ``(H, W)``
    from a crop or resize transform (``RandomCrop(32)``), with the source."""
    if options is None:
        options = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                dest = argparse_dest(node)
                default = next((k.value for k in node.keywords if k.arg == "default"), None)
                if dest is not None:
                    options.setdefault(dest, (default, node))
    for dest in _SIZE_OPTIONS:
        found = options.get(dest)
        value = _literal(found[0]) if found is not None and found[0] is not None else None
        if isinstance(value, int) and not isinstance(value, bool) and 8 <= value <= 1024:
            return (value, value), f"the `--{dest.replace('_', '-')}` default ({value})"
    dataset: tuple[tuple[int, ...], str] | None = None
    size: tuple[tuple[int, ...], str] | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _SIZE_TRANSFORMS and size is None and node.args:
                value = _literal(node.args[0])
                if isinstance(value, (list, tuple)) and value:
                    value = value[0]
                if isinstance(value, int) and not isinstance(value, bool) and 8 <= value <= 1024:
                    size = (value, value), f"`{name}({value})` at line {node.lineno}"
            if dataset is None:
                lowered = name.lower()
                key = lowered if lowered in _DATASETS else next(
                    (k for k in _DATASETS if len(k) > 4 and f"_{k}_" in f"_{lowered}_"), None)
                if key is not None:  # `CIFAR10(...)`, `build_imagenet_data(...)`
                    dataset = _DATASETS[key], f"`{name}` (line {node.lineno})"
    for dest in ("dataset", "data", "data_set", "dataset_name"):
        found = options.get(dest)
        value = _literal(found[0]) if found is not None and found[0] is not None else None
        if isinstance(value, str) and value.lower().replace("-", "") in _DATASETS:
            dataset = _DATASETS[value.lower().replace("-", "")], f"the `--{dest}` default ({value!r})"
            break
    if dataset is not None and size is not None and dataset[0][1:] != size[0]:
        # a crop decides the size fed, the dataset the channels
        return (dataset[0][0],) + size[0], f"{size[1]}, {dataset[1]}"
    return dataset or size


__all__ = ["EntryConstruction", "EntryPlanner", "data_hint", "EVAL_HELPER", "WEIGHT_KEYWORDS"]
