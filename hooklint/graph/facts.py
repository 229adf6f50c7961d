"""Graph facts: plain data about analysed models, shared by the worker (which
computes them), the cache, ``hooklint graph`` and the rules (``ctx.graph``).

This module must not import torch: rules read these values in the static
process.  Everything round-trips through JSON (``to_dict`` / ``from_dict``).

Vocabulary:

* a *model* is one instance the worker built (``MyNet()`` from a call in the
  file, a no-argument constructor, or a factory) and analysed;
* a *module* is one entry of that model's ``named_modules()``, by path
  (``""`` is the model itself, ``"f1"``, ``"layer1.0.conv1"``);
* an *op* is one autograd node its forward created (``AddmmBackward0``), or,
  when no example input could be run, one torch.fx node (``truediv``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

FACTS_VERSION = 4  # 3: regions (compile) and linked hooks, bases (graphreal); 4: both

Shape = tuple[int, ...]


def _shape_list(shapes: list[Shape | None] | None) -> list[list[int] | None] | None:
    if shapes is None:
        return None
    return [None if s is None else list(s) for s in shapes]


def _shape_tuple(shapes: list[list[int] | None] | None) -> list[Shape | None] | None:
    if shapes is None:
        return None
    return [None if s is None else tuple(s) for s in shapes]


def format_shape(shape: Shape | None) -> str:
    return "None" if shape is None else "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


@dataclass(frozen=True)
class Op:
    """One op a module's forward ran."""

    name: str  # autograd node class ("AddmmBackward0") or fx target ("truediv")
    module: str  # path of the innermost module whose forward ran it ("" for the model)
    file: str | None = None  # where, in user code (torch's own frames are skipped)
    line: int | None = None
    function: str | None = None  # "MyMean.forward"
    code: str | None = None  # the source line, stripped
    # Shapes of what a legacy hook bound to this op receives as grad_input (one
    # entry per input of the op, None where that input needs no grad).  Known
    # only for autograd ops.
    grad_input: list[Shape | None] | None = None
    autograd: bool = True  # False: an fx node (no example input could be run)

    @property
    def short(self) -> str:
        """``AddmmBackward0`` -> ``addmm``-style short name for tables."""
        name = self.name
        if self.autograd and "Backward" in name:
            name = name[: name.rindex("Backward")]
        return name

    def where(self, relative_to: str | None = None) -> str:
        """``model.py:12 in MyMean.forward`` (the file is omitted when it is ``relative_to``)."""
        if self.line is None:
            return ""
        place = f"line {self.line}" if relative_to is not None and self.file == relative_to else \
            f"{_basename(self.file)}:{self.line}"
        return f"{place} in {self.function}" if self.function else place

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["grad_input"] = _shape_list(self.grad_input)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Op":
        data = dict(data)
        data["grad_input"] = _shape_tuple(data.get("grad_input"))
        return cls(**data)


@dataclass(frozen=True)
class ModuleFacts:
    path: str  # "" for the model itself
    class_name: str
    class_qualname: str  # "torch.nn.modules.linear.Linear", "seed004.MyMean"
    class_file: str | None = None  # absolute path of the file defining the class
    class_line: int | None = None
    calls: int = 0  # how many times the model's forward called it
    ops: tuple[Op, ...] = ()  # in the order they ran (first call)
    # What a legacy backward hook on this module is attached to: the grad_fn of
    # its output.  ``bound_is_own`` is False when that op is not one of its own
    # (a no-op Flatten returns its input: the hook lands on the op before it).
    bound: Op | None = None
    bound_is_own: bool = False
    # The legacy hook's grad_input starts with exactly the gradients of the
    # module's inputs (one op on the data path; other inputs of that op are the
    # module's parameters).  None: not known (no autograd-level facts).
    legacy_safe: bool | None = None
    # Its inputs can come straight from data that needs no grad (no trainable
    # parameter upstream): a full backward hook then fires when the output
    # gradient is computed, before its parameters' .grad is accumulated.
    inputs_from_data: bool | None = None
    output_needs_grad: bool | None = None  # a trainable parameter is upstream of (or in) it
    output_inplace: Op | None = None  # an op after it that modifies its output in place
    input_inplace: Op | None = None  # an op of its own that modifies its input in place
    trainable_params: int = 0  # its own parameters (not its children's) that require grad
    # Where its forward runs (docs/compile.md): inside code the model compiles itself
    # (`torch.compile(submodule)`, `submodule.compile()`), and inside an activation-checkpointed
    # region ("non-reentrant" / "reentrant"; "" not; None: not known, the model did not run).
    compiled: bool = False
    checkpointed: str | None = None
    # names of its class's bases (MRO, torch.nn.Module and object left out): `isinstance`
    # filters in library code keep subclasses too
    bases: tuple[str, ...] = ()

    @property
    def display_path(self) -> str:
        return self.path or "(model)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "class_name": self.class_name,
            "class_qualname": self.class_qualname,
            "class_file": self.class_file,
            "class_line": self.class_line,
            "calls": self.calls,
            "ops": [o.to_dict() for o in self.ops],
            "bound": self.bound.to_dict() if self.bound else None,
            "bound_is_own": self.bound_is_own,
            "legacy_safe": self.legacy_safe,
            "inputs_from_data": self.inputs_from_data,
            "output_needs_grad": self.output_needs_grad,
            "output_inplace": self.output_inplace.to_dict() if self.output_inplace else None,
            "input_inplace": self.input_inplace.to_dict() if self.input_inplace else None,
            "trainable_params": self.trainable_params,
            "compiled": self.compiled,
            "checkpointed": self.checkpointed,
            "bases": list(self.bases),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModuleFacts":
        def op(key: str) -> Op | None:
            value = data.get(key)
            return Op.from_dict(value) if value else None

        return cls(
            path=data["path"],
            class_name=data["class_name"],
            class_qualname=data["class_qualname"],
            class_file=data.get("class_file"),
            class_line=data.get("class_line"),
            calls=data.get("calls", 0),
            ops=tuple(Op.from_dict(o) for o in data.get("ops", ())),
            bound=op("bound"),
            bound_is_own=data.get("bound_is_own", False),
            legacy_safe=data.get("legacy_safe"),
            inputs_from_data=data.get("inputs_from_data"),
            output_needs_grad=data.get("output_needs_grad"),
            output_inplace=op("output_inplace"),
            input_inplace=op("input_inplace"),
            trainable_params=data.get("trainable_params", 0),
            compiled=data.get("compiled", False),
            checkpointed=data.get("checkpointed"),
            bases=tuple(data.get("bases", ())),
        )


@dataclass(frozen=True)
class TensorSpec:
    dtype: str  # "float32", "int64"
    shape: Shape

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class ModelFacts:
    """One analysed instance."""

    class_name: str
    class_file: str | None
    class_line: int | None
    source: str  # how it was built: "MyNet()", "a no-argument constructor", "factory pkg.mod:build"
    call_line: int | None = None  # the line of the constructor call in the file it came from
    origin_file: str | None = None  # the checked file whose analysis built it (None for factories)
    method: str = "fx"  # "fx": torch.fx symbolic trace; "autograd": a forward + grad_fn walk
    fx_error: str | None = None  # why fx could not trace it (method "autograd")
    autograd: bool = True  # ops are autograd nodes (a forward ran); False: fx nodes only
    inputs: tuple[TensorSpec, ...] = ()
    inputs_origin: str = ""  # "declared by the factory", "derived from f1 (Linear, in_features=4)"
    note: str = ""  # why there are no autograd-level facts, when there are none
    modules: tuple[ModuleFacts, ...] = ()

    @property
    def label(self) -> str:
        return self.class_name if self.call_line is None else f"{self.class_name} (line {self.call_line})"

    def module(self, path: str) -> ModuleFacts | None:
        for m in self.modules:
            if m.path == path:
                return m
        return None

    @property
    def root(self) -> ModuleFacts | None:
        return self.module("")

    def describe_method(self) -> str:
        if self.method == "fx":
            how = "traced with torch.fx"
        else:
            how = f"analysed by running a forward and walking grad_fn (fx could not trace it: {self.fx_error})"
        if self.autograd and self.inputs:
            return f"{how}; example input {', '.join(str(i) for i in self.inputs)}" + (
                f" {self.inputs_origin}" if self.inputs_origin else "")
        if not self.autograd:
            return f"{how}; fx nodes only ({self.note})" if self.note else f"{how}; fx nodes only"
        return how

    def to_dict(self) -> dict[str, Any]:
        return {
            "class_name": self.class_name,
            "class_file": self.class_file,
            "class_line": self.class_line,
            "source": self.source,
            "call_line": self.call_line,
            "origin_file": self.origin_file,
            "method": self.method,
            "fx_error": self.fx_error,
            "autograd": self.autograd,
            "inputs": [{"dtype": i.dtype, "shape": list(i.shape)} for i in self.inputs],
            "inputs_origin": self.inputs_origin,
            "note": self.note,
            "modules": [m.to_dict() for m in self.modules],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelFacts":
        return cls(
            class_name=data["class_name"],
            class_file=data.get("class_file"),
            class_line=data.get("class_line"),
            source=data.get("source", ""),
            call_line=data.get("call_line"),
            origin_file=data.get("origin_file"),
            method=data.get("method", "fx"),
            fx_error=data.get("fx_error"),
            autograd=data.get("autograd", True),
            inputs=tuple(TensorSpec(i["dtype"], tuple(i["shape"])) for i in data.get("inputs", ())),
            inputs_origin=data.get("inputs_origin", ""),
            note=data.get("note", ""),
            modules=tuple(ModuleFacts.from_dict(m) for m in data.get("modules", ())),
        )


@dataclass(frozen=True)
class Unanalysed:
    """A module class of the file that no analysed model covers, and why."""

    class_name: str
    line: int | None
    reason: str
    kind: str = ""  # "timeout": it was stopped after the time budget (an error, not an info)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Unanalysed":
        return cls(**data)


@dataclass(frozen=True)
class LinkedHook:
    """A hook this file registers on a model another checked file builds
    (:mod:`hooklint.graph.crossfile`): computed in the parent after the
    analysis, never cached (it depends on the other files)."""

    line: int  # the registering call in this file
    col: int  # 1-based
    kind: str  # HookKind value
    method: str  # "register_backward_hook"
    model: ModelFacts  # the caller's model
    paths: tuple[str, ...]  # its modules the hook lands on (may land on, when not exact)
    exact: bool  # every one of them is hooked when the call runs
    complete: bool  # every call of the hooking code in the checked files was linked
    via: tuple[str, ...]  # the calls that brought the model here, outermost first ("main.py:86 `KFAC(net)`")
    callee: str  # the callable the caller called ("KFACOptimizer")
    callee_key: tuple[str, str] = ("", "")  # (file, qualname) of the callable holding the registration
    all_built: bool = True  # every configuration of the caller's model statement was built

    def with_complete(self, value: bool) -> "LinkedHook":
        from dataclasses import replace

        return replace(self, complete=value)

    def pairs(self) -> list[tuple[ModelFacts, ModuleFacts]]:
        out = []
        for path in self.paths:
            module = self.model.module(path)
            if module is not None:
                out.append((self.model, module))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "col": self.col, "kind": self.kind, "method": self.method,
                "model": {"class_name": self.model.class_name, "source": self.model.source,
                          "origin_file": self.model.origin_file, "call_line": self.model.call_line},
                "modules": list(self.paths), "exact": self.exact, "complete": self.complete,
                "via": list(self.via), "callee": self.callee}


@dataclass
class FileFacts:
    """What the graph layer knows about one checked file."""

    path: str  # as the user gave it
    models: list[ModelFacts] = field(default_factory=list)
    unanalysed: list[Unanalysed] = field(default_factory=list)
    # A failure of the whole file (import failed, crashed, timed out): then
    # ``models`` holds only what finished before it.
    error: str | None = None
    error_kind: str | None = None  # "import", "timeout", "crash", "worker" (torch unusable), "internal"
    skipped_statements: int = 0  # top-level statements not executed
    cached: bool = False  # read from .hooklint_cache (no user code ran)
    # Models from other files' analyses whose modules include classes defined
    # here (so that ``self.register_...`` in those classes can be linked).
    borrowed: list[ModelFacts] = field(default_factory=list)
    # Hooks registered here on models other checked files build (not cached).
    linked: list[LinkedHook] = field(default_factory=list)
    linked_only: bool = False  # not imported by the graph layer: facts made only to hold `linked`
    origin: str | None = None  # the path the checked file was given as (set by the linking)

    def linked_at(self, line: int, col: int) -> list[LinkedHook]:
        """Links of the registration at ``line``:``col`` (1-based column)."""
        return [link for link in self.linked if link.line == line and link.col == col]

    def all_models(self) -> Iterator[ModelFacts]:
        yield from self.models
        yield from self.borrowed

    def models_of_class(self, class_name: str) -> list[ModelFacts]:
        return [m for m in self.all_models() if m.class_name == class_name]

    def occurrences(self, class_name: str) -> list[tuple[ModelFacts, ModuleFacts]]:
        """Every module of class ``class_name`` in every model known for this file."""
        out = []
        for model in self.all_models():
            for module in model.modules:
                if module.class_name == class_name:
                    out.append((model, module))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": FACTS_VERSION,
            "path": self.path,
            "models": [m.to_dict() for m in self.models],
            "unanalysed": [u.to_dict() for u in self.unanalysed],
            "error": self.error,
            "error_kind": self.error_kind,
            "skipped_statements": self.skipped_statements,
            "cached": self.cached,
            "linked": [link.to_dict() for link in self.linked],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FileFacts":
        return cls(
            path=data["path"],
            models=[ModelFacts.from_dict(m) for m in data.get("models", ())],
            unanalysed=[Unanalysed.from_dict(u) for u in data.get("unanalysed", ())],
            error=data.get("error"),
            error_kind=data.get("error_kind"),
            skipped_statements=data.get("skipped_statements", 0),
            cached=data.get("cached", False),
        )


def _basename(path: str | None) -> str:
    if not path:
        return "?"
    return path.replace("\\", "/").rsplit("/", 1)[-1]
