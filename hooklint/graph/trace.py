"""Per-module graph facts of one model instance (imports torch; worker only).

Two methods, tried in this order:

``fx``
    ``torch.fx`` symbolic tracing with a tracer that traces through the
    user's modules, keeps torch's built-in layers as leaves, records every
    module call (its input and output nodes) and, for every node, the user's
    source line (torch's own frames are skipped).  An augmented assignment
    (``y += x``) is recorded as the in-place op it is (fx would otherwise
    record ``add``).  The traced graph is then run on example inputs, and
    every autograd node each fx node creates is attributed to it, so each
    module gets its autograd ops with source lines.  Without example inputs
    the facts stay at the level of fx nodes.

``autograd``
    When fx cannot trace the model (data-dependent control flow, custom
    autograd Functions...): one forward on example inputs, in anomaly mode
    (which records each autograd node's forward traceback), with forward
    pre-hooks and hooks on every module delimiting the module calls; the
    autograd nodes each call created are found by walking ``grad_fn``
    ``.next_functions`` from its outputs.

Either way, the op a legacy backward hook binds to is the ``grad_fn`` of the
module's output as ``Module._call_impl`` picks it (the first tensor, after
forward hooks), and its ``grad_input`` shapes are the shapes of that node's
inputs (``next_functions`` and their ``_input_metadata``).
"""

from __future__ import annotations

import dis
import linecache
import operator
import os
import sys
import sysconfig
import warnings
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.fx as fx
from torch import nn

from hooklint.graph.facts import ModelFacts, ModuleFacts, Op, TensorSpec

# ---------------------------------------------------------------- frames

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_HOOKLINT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIRS = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})


def is_user_file(filename: str) -> bool:
    """Frames worth showing: not torch, not hooklint, not the standard library."""
    if not filename or filename.startswith("<"):
        return False
    if filename.startswith((_TORCH_DIR, _HOOKLINT_DIR)):
        return False
    real = os.path.realpath(filename)
    return not (real.startswith(_STDLIB_DIRS) and "site-packages" not in real)


@dataclass(frozen=True)
class Site:
    file: str
    line: int
    function: str

    def code(self) -> str | None:
        """The line, without its trailing comment: what the cached facts are keyed
        on (hooklint.graph.code_text), so a comment edited there keeps them right."""
        from hooklint.graph.code_text import without_comment

        text = without_comment(linecache.getline(self.file, self.line)).strip()
        return text or None


def _user_frame(start) -> Any:
    frame = start
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _site_of(frame) -> Site | None:
    if frame is None:
        return None
    code = frame.f_code
    return Site(code.co_filename, frame.f_lineno, getattr(code, "co_qualname", code.co_name))


@lru_cache(maxsize=512)
def _augmented_offsets(code) -> frozenset[int]:
    """Offsets of the instructions of ``code`` that are augmented assignments."""
    out = set()
    for ins in dis.get_instructions(code):
        if ins.opname.startswith("INPLACE_") or (ins.opname == "BINARY_OP" and ins.argrepr.endswith("=")):
            out.add(ins.offset)
    return frozenset(out)


_AUGMENTED = {
    operator.add: operator.iadd, operator.sub: operator.isub, operator.mul: operator.imul,
    operator.truediv: operator.itruediv, operator.floordiv: operator.ifloordiv, operator.mod: operator.imod,
    operator.pow: operator.ipow, operator.matmul: operator.imatmul, operator.and_: operator.iand,
    operator.or_: operator.ior, operator.xor: operator.ixor, operator.lshift: operator.ilshift,
    operator.rshift: operator.irshift,
}
_AUGMENTED_SYMBOL = {
    operator.iadd: "+=", operator.isub: "-=", operator.imul: "*=", operator.itruediv: "/=",
    operator.ifloordiv: "//=", operator.imod: "%=", operator.ipow: "**=", operator.imatmul: "@=",
    operator.iand: "&=", operator.ior: "|=", operator.ixor: "^=", operator.ilshift: "<<=",
    operator.irshift: ">>=",
}

# ---------------------------------------------------------------- fx tracing


@dataclass(eq=False)
class _FxCall:
    path: str
    module: nn.Module
    inputs: list[fx.Node]
    ret: Any = None  # the returned structure, with fx Nodes in place of proxies
    start: int = 0  # node index range [start, end) created during the call
    end: int = 0
    leaf: bool = False


def _leaves(value: Any, pick: Callable[[Any], Any]) -> list[Any]:
    """What ``pick`` returns (when not None) for the leaves of nested
    tuples, lists and dict values, in order."""
    out: list[Any] = []

    def visit(v: Any) -> None:
        if isinstance(v, (tuple, list)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)
        else:
            picked = pick(v)
            if picked is not None:
                out.append(picked)

    visit(value)
    return out


def _nodes_in(value: Any) -> list[fx.Node]:
    return _leaves(value, lambda v: v.node if isinstance(v, fx.Proxy) else v if isinstance(v, fx.Node) else None)


def _to_nodes(value: Any) -> Any:
    if isinstance(value, fx.Proxy):
        return value.node
    if isinstance(value, (tuple, list)):
        return type(value)(_to_nodes(v) for v in value) if not hasattr(value, "_fields") else \
            type(value)(*(_to_nodes(v) for v in value))
    if isinstance(value, dict):
        return {k: _to_nodes(v) for k, v in value.items()}
    return value


# A traced graph this big is a loop building nodes, not a model: the largest
# architectures in bench/graph_cost.py trace to a few thousand nodes.
MAX_TRACE_NODES = 50_000


class _Tracer(fx.Tracer):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[_FxCall] = []
        self.sites: dict[fx.Node, Site | None] = {}
        self.node_count = 0

    def call_module(self, m, forward, args, kwargs):
        path = self.path_of_module(m)
        call = _FxCall(path, m, _nodes_in((args, kwargs)), start=len(self.graph.nodes),
                       leaf=self.is_leaf_module(m, path))
        self.calls.append(call)
        ret = super().call_module(m, forward, args, kwargs)
        call.ret = _to_nodes(ret)
        call.end = len(self.graph.nodes)
        return ret

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        self.node_count += 1
        if self.node_count > MAX_TRACE_NODES:
            raise fx.proxy.TraceError(f"the traced graph grew past {MAX_TRACE_NODES} nodes (a loop that "
                                      f"runs until a traced value satisfies a test never ends under fx)")
        _refuse_custom_function(sys._getframe(1))
        frame = _user_frame(sys._getframe(1))
        if kind == "call_function" and target in _AUGMENTED and frame is not None \
                and frame.f_lasti in _augmented_offsets(frame.f_code):
            target = _AUGMENTED[target]  # run it in place, as the real forward does
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        self.sites[node] = _site_of(frame)
        return node


_FUNCTION_APPLY = os.path.join("torch", "autograd", "function.py")


def _refuse_custom_function(frame) -> None:
    """fx would trace *into* a custom ``autograd.Function``'s forward and lose its
    backward (seed 002): such models must be analysed by running them instead."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "apply" and code.co_filename.endswith(_FUNCTION_APPLY):
            owner = frame.f_locals.get("cls")
            name = getattr(owner, "__name__", "a custom autograd.Function")
            raise fx.proxy.TraceError(f"{name}.apply is a custom autograd.Function; fx would trace into its "
                                      f"forward and lose its backward")
        frame = frame.f_back


@dataclass
class FxTrace:
    graph_module: fx.GraphModule
    calls: list[_FxCall]  # the model itself first, then every module call in entry order
    sites: dict[fx.Node, Site | None]
    index: dict[fx.Node, int]

    def owner(self) -> dict[fx.Node, _FxCall]:
        """The innermost module call each node was created in."""
        owners: dict[fx.Node, _FxCall] = {}
        nodes = list(self.graph_module.graph.nodes)
        for call in self.calls:  # outer calls are entered first: inner ones overwrite
            for node in nodes[call.start:call.end]:
                owners[node] = call
        return owners


def _defaults_beyond(model: nn.Module, given: int | None) -> dict[str, Any]:
    """Optional forward parameters the example inputs do not fill, at their default:
    traced as constants, so that ``if mask is not None:`` takes the branch a call
    without ``mask`` takes (a placeholder would take the other one)."""
    import inspect

    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return {}
    out = {}
    for position, param in enumerate(params):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.default is param.empty:
            continue
        if given is None or position >= given:
            out[param.name] = param.default
    return out


def fx_trace(model: nn.Module, given_inputs: int | None = None) -> FxTrace:
    tracer = _Tracer()
    graph = tracer.trace(model, concrete_args=_defaults_beyond(model, given_inputs) or None)
    gm = fx.GraphModule(tracer.root, graph)
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    output = next(n for n in nodes if n.op == "output")
    root = _FxCall("", model, placeholders, ret=output.args[0], start=0, end=len(nodes))
    return FxTrace(gm, [root, *tracer.calls], tracer.sites, {n: i for i, n in enumerate(nodes)})


# ---------------------------------------------------------------- in-place ops

_VIEW_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose",
    "permute", "t", "expand", "expand_as", "narrow", "select", "unfold", "split", "chunk", "unbind",
    "movedim", "swapaxes", "swapdims", "as_strided", "diagonal", "__getitem__",
})
_VIEW_FUNCTIONS = frozenset({operator.getitem, torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze,
                             torch.transpose, torch.permute, torch.narrow, torch.select, torch.split,
                             torch.chunk, torch.unbind, torch.movedim, torch.t})


def _target_name(target: Any) -> str:
    return getattr(target, "__name__", None) or str(target)


def inplace_description(node: fx.Node, modules: dict[str, nn.Module]) -> str | None:
    """How ``node`` modifies its first argument in place, or None if it does not."""
    if node.op == "call_method":
        name = str(node.target)
        if name.endswith("_") and not name.startswith("_"):
            return f".{name}()"
        return None
    if node.op == "call_function":
        if node.target in _AUGMENTED_SYMBOL:
            return f"`{_AUGMENTED_SYMBOL[node.target]}`"
        if node.target is operator.setitem:
            return "an item assignment (`x[...] = ...`)"
        name = _target_name(node.target)
        if node.kwargs.get("inplace") is True:
            return f"{name}(..., inplace=True)"
        if name.endswith("_") and not name.startswith("_"):
            return f"{name}()"
        return None
    if node.op == "call_module":
        module = modules.get(str(node.target))
        if module is not None and getattr(module, "inplace", False) is True:
            return f"{type(module).__name__}(inplace=True)"
    return None


def _view_roots(node: Any) -> list[fx.Node]:
    """``node`` and the nodes it is a view (or an element) of."""
    out: list[fx.Node] = []
    while isinstance(node, fx.Node):
        out.append(node)
        viewing = (node.op == "call_method" and node.target in _VIEW_METHODS) or (
            node.op == "call_function" and node.target in _VIEW_FUNCTIONS)
        if not viewing or not node.args:
            break
        node = node.args[0]
    return out


# ---------------------------------------------------------------- autograd helpers

_PROBE: torch.Tensor | None = None


def watermark() -> int:
    """The sequence number the next autograd node will get (minus one)."""
    global _PROBE
    if _PROBE is None:
        _PROBE = torch.zeros((), requires_grad=True)
    with torch.enable_grad():
        return _PROBE.mul(1).grad_fn._sequence_nr()  # type: ignore[union-attr]


def tensors_in(value: Any) -> list[torch.Tensor]:
    return _leaves(value, lambda v: v if isinstance(v, torch.Tensor) else None)


def _first_of(structure: Any, kind: type) -> Any:
    """The first ``kind`` reached through first elements and first matching dict
    values, as ``Module._call_impl`` looks for the tensor to hook."""
    var = structure
    for _ in range(64):
        if isinstance(var, kind):
            return var
        if isinstance(var, dict):
            var = next((v for v in var.values() if isinstance(v, kind)), None)
        elif isinstance(var, (tuple, list)) and var:
            var = var[0]
        else:
            return None
    return None


def hooked_tensor(result: Any) -> torch.Tensor | None:
    """The tensor whose grad_fn a legacy hook is attached to (``Module._call_impl``)."""
    return _first_of(result, torch.Tensor)


def new_nodes(outputs: Iterable[torch.Tensor], mark: int) -> list[Any]:
    """Autograd nodes reachable from ``outputs`` created after ``mark``, in creation order."""
    found: dict[Any, int] = {}
    stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in found:
            continue
        seq = node._sequence_nr()
        if seq <= mark or type(node).__name__ == "AccumulateGrad":
            continue
        found[node] = seq
        stack.extend(fn for fn, _ in node.next_functions)
    return sorted(found, key=found.__getitem__)


def grad_input_shapes(node: Any) -> list[tuple[int, ...] | None] | None:
    shapes: list[tuple[int, ...] | None] = []
    try:
        for fn, nr in node.next_functions:
            shapes.append(None if fn is None else tuple(fn._input_metadata[nr].shape))
    except (RuntimeError, IndexError, AttributeError):
        return None
    return shapes


@dataclass(frozen=True, eq=False)
class InputRef:
    """A module input as it was when the call started (an in-place op inside the
    module may change its grad_fn afterwards)."""

    tensor: torch.Tensor
    grad_fn: Any
    output_nr: int
    requires_grad: bool

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "InputRef":
        return cls(tensor, tensor.grad_fn, tensor.output_nr, tensor.requires_grad)

    @property
    def is_data(self) -> bool:
        return self.tensor.is_floating_point() or self.tensor.is_complex()

    def is_edge(self, edge: tuple[Any, int]) -> bool:
        """Whether an autograd edge (``next_functions`` entry) is this input."""
        fn, nr = edge
        if fn is None:
            return not self.requires_grad
        if self.grad_fn is not None:
            return fn is self.grad_fn and nr == self.output_nr
        return getattr(fn, "variable", None) is self.tensor


def input_refs(value: Any) -> list[InputRef]:
    return [InputRef.of(t) for t in tensors_in(value)]


class ParamFlow:
    """Whether a tensor depends on a trainable parameter of the model, memoised per node."""

    def __init__(self, model: nn.Module):
        self.params = {id(p) for p in model.parameters() if p.requires_grad}
        self.memo: dict[Any, bool] = {}

    def ref(self, ref: InputRef) -> bool:
        if ref.grad_fn is None:
            return id(ref.tensor) in self.params
        return self.node(ref.grad_fn)

    def node(self, root: Any) -> bool:
        # iterative post-order: deep graphs must not hit the recursion limit
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node is None or (node in self.memo and not expanded):
                continue
            variable = getattr(node, "variable", None)
            if variable is not None:
                self.memo[node] = id(variable) in self.params
                continue
            children = [fn for fn, _ in node.next_functions if fn is not None]
            if expanded:
                self.memo[node] = any(self.memo.get(c, False) for c in children)
            else:
                stack.append((node, True))
                stack.extend((c, False) for c in children if c not in self.memo)
        return self.memo.get(root, False)


# ---------------------------------------------------------------- one module call, however observed


@dataclass(eq=False)
class CallRecord:
    path: str
    module: nn.Module
    inputs: list[InputRef]  # at the start of the call
    outputs: list[InputRef]  # at the end of the call
    bound: Any  # grad_fn a legacy hook registered by this call is attached to
    ops: list[Any]  # autograd nodes created during the call, in creation order
    output_inplace: Op | None = None
    input_inplace: Op | None = None


@dataclass
class AutogradView:
    """What both methods produce: module calls, and where every node came from."""

    calls: list[CallRecord]
    owner: dict[Any, str]  # autograd node -> path of the innermost module that created it
    site: dict[Any, Site | None]  # autograd node -> user source line
    flow: ParamFlow

    def op(self, node: Any) -> Op:
        site = self.site.get(node)
        return Op(name=type(node).__name__, module=self.owner.get(node, ""),
                  file=site.file if site else None, line=site.line if site else None,
                  function=site.function if site else None, code=site.code() if site else None,
                  grad_input=grad_input_shapes(node))


def _legacy_safe(record: CallRecord) -> bool:
    """grad_input of the legacy hook starts with exactly the module's input gradients."""
    inputs = [r for r in record.inputs if r.is_data]
    own = set(record.ops)
    bound = record.bound
    if bound is None or bound not in own or not inputs:
        return False
    edges = list(bound.next_functions)
    if len(edges) < len(inputs) or not all(r.is_edge(e) for e, r in zip(edges, inputs)):
        return False
    # the op's other inputs must not lead back to the module's inputs (then
    # grad_input would hold only part of an input's gradient)
    needing_grad = [r for r in inputs if r.requires_grad]
    stack = edges[len(inputs):]
    seen: set[Any] = set()
    while stack:
        edge = stack.pop()
        if edge[0] is None:
            continue
        if any(r.is_edge(edge) for r in needing_grad):
            return False
        if edge[0] in own and edge[0] not in seen:
            seen.add(edge[0])
            stack.extend(edge[0].next_functions)
    return True


Describe = Callable[[nn.Module], "tuple[str, str, str | None, int | None]"]


def module_facts_from_autograd(model: nn.Module, view: AutogradView, describe: Describe) -> list[ModuleFacts]:
    by_module: dict[int, list[CallRecord]] = {}
    for record in view.calls:
        by_module.setdefault(id(record.module), []).append(record)
    out = []
    for path, module in model.named_modules(remove_duplicate=False):
        name, qualname, file, line = describe(module)
        own_params = sum(1 for p in module.parameters(recurse=False) if p.requires_grad)
        records = by_module.get(id(module), [])
        if not records:
            out.append(ModuleFacts(path, name, qualname, file, line, trainable_params=own_params))
            continue
        first = records[0]
        with_inputs = [r for r in records if r.inputs]
        out.append(ModuleFacts(
            path=path, class_name=name, class_qualname=qualname, class_file=file, class_line=line,
            calls=len(records),
            ops=tuple(view.op(n) for n in first.ops),
            bound=view.op(first.bound) if first.bound is not None else None,
            bound_is_own=first.bound is not None and first.bound in set(first.ops),
            legacy_safe=all(_legacy_safe(r) for r in records),
            inputs_from_data=any(not any(view.flow.ref(i) for i in r.inputs) for r in with_inputs)
            if with_inputs else None,
            output_needs_grad=any(view.flow.ref(o) for o in first.outputs) if first.outputs else None,
            output_inplace=next((r.output_inplace for r in records if r.output_inplace), None),
            input_inplace=next((r.input_inplace for r in records if r.input_inplace), None),
            trainable_params=own_params,
        ))
    return out


# ---------------------------------------------------------------- fx method: run the traced graph


class _Runner(fx.Interpreter):
    """Runs the traced graph, recording the autograd nodes each fx node creates
    and the module calls' inputs (at their start) and outputs (at their end)."""

    def __init__(self, trace: FxTrace, root_inputs: list[InputRef]):
        super().__init__(trace.graph_module, garbage_collect_values=False)
        self.trace = trace
        self.created: dict[fx.Node, list[Any]] = {}
        self.starting: dict[int, list[int]] = {}
        self.ending: dict[int, list[int]] = {}
        for i, call in enumerate(trace.calls[1:], start=1):
            self.starting.setdefault(call.start, []).append(i)
            self.ending.setdefault(call.end - 1, []).append(i)
        self.inputs: dict[int, list[InputRef]] = {0: root_inputs}
        self.results: dict[int, tuple[Any, list[InputRef], Any]] = {}

    def run_node(self, n: fx.Node) -> Any:
        position = self.trace.index[n]
        for i in self.starting.get(position, ()):
            self.inputs[i] = input_refs([self.env.get(x) for x in self.trace.calls[i].inputs])
        if n.op in ("call_function", "call_method", "call_module"):
            mark = watermark()
            result = super().run_node(n)
            self.created[n] = new_nodes(tensors_in(result), mark)
        else:
            result = super().run_node(n)
        if self.ending.get(position):
            self.env[n] = result
            for i in self.ending[position]:
                self.results[i] = self.snapshot(_value(self.trace.calls[i].ret, self.env))
        return result

    @staticmethod
    def snapshot(result: Any) -> tuple[Any, list[InputRef], Any]:
        tensor = hooked_tensor(result)
        return result, input_refs(result), tensor.grad_fn if tensor is not None else None


def _value(structure: Any, env: dict[fx.Node, Any]) -> Any:
    if isinstance(structure, fx.Node):
        return env.get(structure)
    if isinstance(structure, (tuple, list)):
        values = [_value(v, env) for v in structure]
        return type(structure)(*values) if hasattr(structure, "_fields") else type(structure)(values)
    if isinstance(structure, dict):
        return {k: _value(v, env) for k, v in structure.items()}
    return structure


def _fx_op(node: fx.Node, trace: FxTrace, owners: dict[fx.Node, _FxCall], name: str | None = None) -> Op:
    site = trace.sites.get(node)
    owner = owners.get(node)
    if name is None:
        if node.op == "call_module":
            module = owner.module if owner is not None else None
            name = type(module).__name__ if module is not None else str(node.target)
        else:
            name = _target_name(node.target)
    return Op(name=name, module=owner.path if owner else "", file=site.file if site else None,
              line=site.line if site else None, function=site.function if site else None,
              code=site.code() if site else None, autograd=False)


def _fx_inplace(trace: FxTrace, owners: dict[fx.Node, _FxCall]) -> dict[int, tuple[Op | None, Op | None]]:
    """Per module call (by position in ``trace.calls``): (an op after the call that
    modifies its output in place, an op of the call that modifies its input in place)."""
    modules = dict(trace.graph_module.named_modules())
    mutations = []
    for node in trace.graph_module.graph.nodes:
        how = inplace_description(node, modules)
        if how is not None and node.args and isinstance(node.args[0], fx.Node):
            mutations.append((node, how, set(_view_roots(node.args[0]))))
    out: dict[int, tuple[Op | None, Op | None]] = {}
    for i, call in enumerate(trace.calls):
        outputs = set(_nodes_in(call.ret))
        inputs = set(call.inputs)
        output_op = input_op = None
        for node, how, roots in mutations:
            position = trace.index[node]
            if output_op is None and position >= call.end and roots & outputs:
                output_op = _fx_op(node, trace, owners, how)
            if input_op is None and call.start <= position < call.end and roots & inputs:
                input_op = _fx_op(node, trace, owners, how)
        out[i] = (output_op, input_op)
    return out


def run_fx(model: nn.Module, trace: FxTrace, inputs: tuple[Any, ...]) -> AutogradView:
    args = inputs[:len(trace.calls[0].inputs)]
    runner = _Runner(trace, input_refs(args))
    # Ops that forward hooks of built-in layers create run outside the traced
    # code: anomaly mode records where (it slows the forward, so only then).
    hooked = any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    with torch.enable_grad(), torch.autograd.set_detect_anomaly(hooked, check_nan=False):
        result = runner.run(*args)
        mark = watermark()
        result = _apply_root_forward_hooks(model, args, result)
        root_hook_nodes = new_nodes(tensors_in(result), mark)
    runner.results[0] = runner.snapshot(result)
    owners = trace.owner()
    inplace = _fx_inplace(trace, owners)
    owner: dict[Any, str] = {node: "" for node in root_hook_nodes}
    site: dict[Any, Site | None] = {}
    for node, created in runner.created.items():
        call = owners.get(node)
        for autograd_node in created:
            owner.setdefault(autograd_node, call.path if call else "")
            site.setdefault(autograd_node, (_traceback_site(autograd_node) if hooked else None)
                            or trace.sites.get(node))
    for autograd_node in root_hook_nodes:
        site.setdefault(autograd_node, _traceback_site(autograd_node))
    nodes = list(trace.graph_module.graph.nodes)
    records = []
    for i, call in enumerate(trace.calls):
        ops: list[Any] = []
        for node in nodes[call.start:call.end]:
            ops.extend(runner.created.get(node, ()))
        if i == 0:
            ops.extend(root_hook_nodes)
        ops.sort(key=lambda n: n._sequence_nr())
        _result, outputs, bound = runner.results.get(i, (None, [], None))
        output_op, input_op = inplace[i]
        records.append(CallRecord(call.path, call.module, runner.inputs.get(i, []), outputs, bound, ops,
                                  output_op, input_op))
    return AutogradView(records, owner, site, ParamFlow(model))


def _apply_root_forward_hooks(model: nn.Module, args: tuple, result: Any) -> Any:
    """Tracing starts inside the model's forward: apply its own forward hooks, as
    ``Module.__call__`` would, so that the op its legacy hook binds to is right."""
    for hook_id, hook in list(model._forward_hooks.items()):
        if hook_id in model._forward_hooks_with_kwargs:
            new = hook(model, args, {}, result)
        else:
            new = hook(model, args, result)
        if new is not None:
            result = new
    return result


def fx_only_facts(model: nn.Module, trace: FxTrace, describe: Describe) -> list[ModuleFacts]:
    """Facts from the traced graph alone (no example input could be run)."""
    owners = trace.owner()
    inplace = _fx_inplace(trace, owners)
    nodes = list(trace.graph_module.graph.nodes)
    trainable = _fx_trainable_nodes(trace)
    depends: dict[fx.Node, bool] = {}

    def needs_grad(node: fx.Node) -> bool:
        stack, order, seen = [node], [], set()
        while stack:
            n = stack.pop()
            if n in depends or n in seen:
                continue
            seen.add(n)
            order.append(n)
            stack.extend(n.all_input_nodes)
        for n in sorted(order, key=trace.index.__getitem__):
            depends[n] = n in trainable or any(depends.get(i, False) for i in n.all_input_nodes)
        return depends[node]

    by_module: dict[int, list[int]] = {}
    for i, call in enumerate(trace.calls):
        by_module.setdefault(id(call.module), []).append(i)
    out = []
    for path, module in model.named_modules(remove_duplicate=False):
        name, qualname, file, line = describe(module)
        own_params = sum(1 for p in module.parameters(recurse=False) if p.requires_grad)
        indices = by_module.get(id(module), [])
        if not indices:
            out.append(ModuleFacts(path, name, qualname, file, line, trainable_params=own_params))
            continue
        call = trace.calls[indices[0]]
        body = [n for n in nodes[call.start:call.end] if n.op in ("call_function", "call_method", "call_module")
                and n.target not in _SPECIALIZATION_CHECKS]
        hooked = _first_node(call.ret)
        output_nodes = _nodes_in(call.ret)
        with_inputs = [i for i in indices if trace.calls[i].inputs]
        out.append(ModuleFacts(
            path=path, class_name=name, class_qualname=qualname, class_file=file, class_line=line,
            calls=len(indices),
            ops=tuple(_fx_op(n, trace, owners) for n in body),
            bound=_fx_op(hooked, trace, owners) if hooked is not None and hooked.op != "placeholder" else None,
            bound_is_own=hooked is not None and call.start <= trace.index.get(hooked, -1) < call.end,
            legacy_safe=None,
            inputs_from_data=any(not any(needs_grad(n) for n in trace.calls[i].inputs) for i in with_inputs)
            if with_inputs else None,
            output_needs_grad=any(needs_grad(n) for n in output_nodes) if output_nodes else None,
            output_inplace=next((inplace[i][0] for i in indices if inplace[i][0]), None),
            input_inplace=next((inplace[i][1] for i in indices if inplace[i][1]), None),
            trainable_params=own_params,
        ))
    return out


# what fx inserts for the defaults it traced as constants: not the model's ops
_SPECIALIZATION_CHECKS = frozenset({torch._assert, getattr(fx._symbolic_trace, "_assert_is_none", None)})


def _first_node(structure: Any) -> fx.Node | None:
    return _first_of(structure, fx.Node)


def _fx_trainable_nodes(trace: FxTrace) -> set[fx.Node]:
    """Nodes that bring in a trainable parameter (get_attr, or a leaf layer that owns one)."""
    gm = trace.graph_module
    out = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            try:
                value = gm.get_parameter(str(node.target))
            except AttributeError:
                continue
            if value.requires_grad:
                out.add(node)
        elif node.op == "call_module":
            sub = gm.get_submodule(str(node.target))
            if any(p.requires_grad for p in sub.parameters()):
                out.add(node)
    return out


# ---------------------------------------------------------------- autograd method: a forward with hooks


@dataclass(eq=False)
class _LiveCall:
    path: str
    module: nn.Module
    mark: int
    inputs: list[InputRef] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    outputs: list[InputRef] = field(default_factory=list)
    out_versions: list[int] = field(default_factory=list)
    bound: Any = None
    ops: list[Any] = field(default_factory=list)
    input_inplace: Any = None  # the autograd node that modified an input


def run_autograd(model: nn.Module, inputs: tuple[Any, ...]) -> AutogradView:
    paths = {id(m): p for p, m in model.named_modules(remove_duplicate=False)}
    stack: list[_LiveCall] = []
    done: list[_LiveCall] = []
    owner: dict[Any, str] = {}

    def pre_hook(module, args, kwargs):
        call = _LiveCall(paths.get(id(module), "?"), module, watermark(), input_refs((args, kwargs)))
        call.versions = [r.tensor._version for r in call.inputs]
        stack.append(call)

    def post_hook(module, args, kwargs, result):
        if not stack or stack[-1].module is not module:
            return None
        call = stack.pop()
        call.outputs = input_refs(result)
        call.out_versions = [r.tensor._version for r in call.outputs]
        tensor = hooked_tensor(result)
        call.bound = tensor.grad_fn if tensor is not None else None
        changed = [r.tensor for r, v in zip(call.inputs, call.versions) if r.tensor._version != v]
        call.ops = new_nodes([r.tensor for r in call.outputs] + changed, call.mark)
        for node in call.ops:
            owner.setdefault(node, call.path)
        for t in changed:
            if t.grad_fn is not None and t.grad_fn._sequence_nr() > call.mark:
                call.input_inplace = t.grad_fn
                break
        done.append(call)
        return None

    handles = []
    try:
        for module in model.modules():
            handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
            handles.append(module.register_forward_hook(post_hook, with_kwargs=True))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Anomaly Detection has been enabled")
            with torch.enable_grad(), torch.autograd.detect_anomaly(check_nan=False):
                model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    view = AutogradView([], owner, {}, ParamFlow(model))

    def op(node: Any) -> Op:
        if node not in view.site:
            view.site[node] = _traceback_site(node)
        return view.op(node)

    for call in done:
        for node in call.ops:
            op(node)
        output_node = next((r.tensor.grad_fn for r, v in zip(call.outputs, call.out_versions)
                            if r.tensor._version != v and r.tensor.grad_fn is not None), None)
        view.calls.append(CallRecord(
            call.path, call.module, call.inputs, call.outputs, call.bound, call.ops,
            output_inplace=_in_place(op(output_node)) if output_node is not None else None,
            input_inplace=_in_place(op(call.input_inplace)) if call.input_inplace is not None else None))
    # calls complete inner-first; the facts want the model itself first, then entry order
    view.calls.sort(key=lambda r: (r.path != "", r.ops[0]._sequence_nr() if r.ops else 0))
    return view


def _in_place(op: Op) -> Op:
    return Op(name=f"{op.name} (in place)", module=op.module, file=op.file, line=op.line, function=op.function,
              code=op.code, grad_input=op.grad_input, autograd=op.autograd)


def _traceback_site(node: Any) -> Site | None:
    """The innermost user frame of the forward traceback anomaly mode recorded."""
    try:
        frames = node.metadata.get("traceback_")
    except (RuntimeError, AttributeError):
        return None
    if not frames:
        return None
    for entry in reversed(frames):
        first = entry.strip().splitlines()[0] if entry.strip() else ""
        # 'File "/path/model.py", line 12, in forward'
        if not first.startswith("File "):
            continue
        try:
            file_part, line_part, func_part = first.split(", ", 2)
        except ValueError:
            continue
        filename = file_part[len('File "'):-1]
        if is_user_file(filename):
            line = int(line_part.split()[-1])
            return Site(filename, line, qualname_at(filename, line) or func_part[len("in "):])
    return None


@lru_cache(maxsize=256)
def _functions_of(filename: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, qualified name) of every function in a file."""
    import ast

    try:
        with open(filename, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return ()
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                out.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(out)


def qualname_at(filename: str, line: int) -> str | None:
    """The innermost function containing ``line`` (``MyMean.forward``)."""
    best = None
    for first, last, name in _functions_of(filename):
        if first <= line <= last and (best is None or first >= best[0]):
            best = (first, name)
    return best[1] if best else None


# ---------------------------------------------------------------- example inputs


@dataclass
class InputCandidates:
    """Example inputs to try in order, each with where it came from.  An entry's
    inputs may be a function that makes them: most models run on the first
    candidate, and making all of them up front (images of four sides for each
    of four first layers) took most of a small model's analysis."""

    entries: list[tuple[tuple[Any, ...] | Callable[[], tuple[Any, ...]], str]]

    @property
    def tuples(self) -> Iterator[tuple[tuple[Any, ...], str]]:
        """(inputs, origin) in order, each made when it is reached (the random
        values are the same as when all were made first, in this order)."""
        for inputs, origin in self.entries:
            yield (inputs() if callable(inputs) else inputs), origin


_MAX_LAYERS_TRIED = 4


_SPATIAL = {1: (32, 64, 128, 16), 2: (32, 64, 224, 28), 3: (16, 32)}


def _first_layers(model: nn.Module, trace: FxTrace | None) -> list[tuple[str, nn.Module]]:
    """Layers whose input size can be read, the likeliest first: those the traced
    graph calls, in order, then those the model defines (``self.conv.forward(x)``
    is traced into, not called)."""
    out: list[tuple[str, nn.Module]] = []
    if _layer_spec(model) is not None:  # a built-in layer on its own (seed 003's Conv2d)
        out.append(("", model))
    if trace is not None:
        out += [(call.path, call.module) for call in trace.calls[1:] if call.leaf and _layer_spec(call.module)]
    out += [(path, module) for path, module in model.named_modules() if path and _layer_spec(module)]
    seen: set[int] = set()
    unique = []
    for path, module in out:
        if id(module) not in seen:
            seen.add(id(module))
            unique.append((path, module))
    return unique[:_MAX_LAYERS_TRIED]


def _layer_spec(module: nn.Module) -> tuple[str, list[tuple[tuple[int, ...], torch.dtype, int | None]]] | None:
    """(what it was derived from, [(shape, dtype, high for integer inputs)]) for a first layer."""
    if isinstance(module, nn.Linear):
        return f"in_features={module.in_features}", [((2, module.in_features), torch.float32, None)]
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return (f"num_embeddings={module.num_embeddings}",
                [((2, 8), torch.long, module.num_embeddings)])
    conv_dims = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3, nn.ConvTranspose1d: 1, nn.ConvTranspose2d: 2,
                 nn.ConvTranspose3d: 3}
    for cls, dims in conv_dims.items():
        if type(module) is cls:
            channels = module.in_channels  # type: ignore[attr-defined]
            return f"in_channels={channels}", [((2, channels) + (size,) * dims, torch.float32, None)
                                              for size in _SPATIAL[dims]]
    if isinstance(module, (nn.RNNBase,)):
        return f"input_size={module.input_size}", [((2, 5, module.input_size), torch.float32, None)]
    if isinstance(module, (nn.BatchNorm1d, nn.InstanceNorm1d)):
        return f"num_features={module.num_features}", [((2, module.num_features), torch.float32, None),
                                                       ((2, module.num_features, 16), torch.float32, None)]
    if isinstance(module, (nn.BatchNorm2d, nn.InstanceNorm2d, nn.GroupNorm)):
        channels = module.num_channels if isinstance(module, nn.GroupNorm) else module.num_features
        return f"channels={channels}", [((2, channels, size, size), torch.float32, None) for size in _SPATIAL[2]]
    if isinstance(module, nn.LayerNorm):
        shape = tuple(module.normalized_shape)
        return f"normalized_shape={list(shape)}", [((2,) + shape, torch.float32, None),
                                                   ((2, 5) + shape, torch.float32, None)]
    if isinstance(module, (nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
        dim = module.embed_dim if isinstance(module, nn.MultiheadAttention) else \
            module.self_attn.embed_dim  # type: ignore[union-attr]
        return f"embed_dim={dim}", [((2, 5, dim), torch.float32, None)]
    if type(module).__module__.startswith("torch."):
        return None
    # a user-written layer that names its input size the usual ways (seed 002's LinearCraft)
    for attr in _INPUT_SIZE_ATTRIBUTES:
        value = getattr(module, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return f"{attr}={value}", [((2, value), torch.float32, None)]
    weight = module._parameters.get("weight")
    if weight is not None and weight.dim() == 2:  # used as in nn.Linear: (out, in)
        return f"weight of shape {list(weight.shape)}", [((2, weight.shape[1]), torch.float32, None)]
    return None


_INPUT_SIZE_ATTRIBUTES = ("in_features", "input_features", "in_dim", "input_dim", "in_size", "input_size")


def _make(shape: tuple[int, ...], dtype: torch.dtype, high: int | None) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(0, max(1, high or 2), shape, dtype=dtype)


def _maker(shape: tuple[int, ...], dtype: torch.dtype, high: int | None) -> Callable[[], tuple[Any, ...]]:
    return lambda: (_make(shape, dtype, high),)


def forward_arity(model: nn.Module) -> int | None:
    """Required positional inputs of ``forward`` (None when it takes *args)."""
    import inspect

    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return None
    count = 0
    for param in sig.parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            return None
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD) and param.default is param.empty:
            count += 1
    return count


def input_candidates(model: nn.Module, trace: FxTrace | None) -> InputCandidates | str:
    """Example inputs to try, or why none can be derived."""
    declared = getattr(model, "example_input_array", None)
    if isinstance(declared, torch.Tensor) or (isinstance(declared, (tuple, list)) and declared):
        value = (declared,) if isinstance(declared, torch.Tensor) else tuple(declared)
        return InputCandidates([(value, "declared by example_input_array")])
    arity = forward_arity(model)
    if arity is None or arity > 1:
        return ("its forward takes several inputs; declare them with a factory returning "
                "(model, example_inputs) in [tool.hooklint] models")
    if arity == 0:
        return InputCandidates([((), "(forward takes no input)")])
    from hooklint.graph.inputs import image_candidates

    # the model's declared image size, then what the project's data code feeds
    tuples = image_candidates(model)
    for path, layer in _first_layers(model, trace):
        spec = _layer_spec(layer)
        assert spec is not None
        what, shapes = spec
        source = f"{path} ({type(layer).__name__}, {what})" if path else f"the layer itself ({what})"
        tuples += [(_maker(shape, dtype, high), f"derived from {source}") for shape, dtype, high in shapes]
    if not tuples:
        tuples.append((lambda: (torch.randn(2, 8),),
                       "guessed (no first layer with in_features, in_channels or num_embeddings)"))
    return InputCandidates(tuples)


def _prepared(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Fresh leaves; floating ones require grad so that every op gets an autograd node."""
    out = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            value = value.detach().clone()
            if value.is_floating_point() or value.is_complex():
                value.requires_grad_(True)
        out.append(value)
    return tuple(out)


prepared_inputs = _prepared


def spec_of(inputs: tuple[Any, ...]) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(str(t.dtype).replace("torch.", ""), tuple(t.shape))
                 for t in inputs if isinstance(t, torch.Tensor))


# ---------------------------------------------------------------- entry point


class AnalysisError(Exception):
    """Neither method could analyse the model; the message says why."""


@contextmanager
def backward_hooks_detached(model: nn.Module) -> Iterator[None]:
    """The model's module backward hooks (legacy, full, pre), and the global
    ones, set aside while it is analysed, then put back as they were.

    They are not part of what the facts describe (the ops each module's forward
    runs), and under fx they do harm: ``Module._call_impl`` looks for the tensor
    to attach a legacy hook to with ``while not isinstance(var, Tensor): var =
    var[0]``, which on an fx proxy never ends (each ``[0]`` is a new node): a
    Grad-CAM model hooking ``self.layer4`` in its constructor made the worker
    build nodes until the timeout or the memory limit.  Full hooks wrap the
    module's inputs and outputs in ``BackwardHookFunction`` ops, which a
    following in-place op makes fail (HKL403's own case): the analysis must see
    the forward without them to report it.  Forward hooks stay: they do change
    what a legacy hook binds to."""
    from torch.nn.modules import module as module_mod

    saved = []
    for module in model.modules():
        if module._backward_hooks or module._backward_pre_hooks:
            saved.append((module, module._backward_hooks, module._backward_pre_hooks,
                          module._is_full_backward_hook))
            module._backward_hooks = OrderedDict()
            module._backward_pre_hooks = OrderedDict()
            module._is_full_backward_hook = None
    global_hooks = dict(module_mod._global_backward_hooks), dict(module_mod._global_backward_pre_hooks)
    module_mod._global_backward_hooks.clear()
    module_mod._global_backward_pre_hooks.clear()
    try:
        yield
    finally:
        for module, hooks, pre_hooks, is_full in saved:
            module._backward_hooks = hooks
            module._backward_pre_hooks = pre_hooks
            module._is_full_backward_hook = is_full
        module_mod._global_backward_hooks.update(global_hooks[0])
        module_mod._global_backward_pre_hooks.update(global_hooks[1])


def analyse_model(model: nn.Module, *, source: str, describe: Describe,
                  inputs: tuple[Any, ...] | None = None, inputs_origin: str = "",
                  call_line: int | None = None, origin_file: str | None = None) -> ModelFacts:
    with backward_hooks_detached(model):
        return _analyse(model, source=source, describe=describe, inputs=inputs, inputs_origin=inputs_origin,
                        call_line=call_line, origin_file=origin_file)


def _analyse(model: nn.Module, *, source: str, describe: Describe, inputs: tuple[Any, ...] | None,
             inputs_origin: str, call_line: int | None, origin_file: str | None) -> ModelFacts:
    name, _qualname, class_file, class_line = describe(model)
    trace: FxTrace | None = None
    fx_error: str | None = None
    try:
        trace = fx_trace(model, len(inputs) if inputs is not None else None)
    except Exception as exc:  # noqa: BLE001 - any tracing failure means: use the fallback
        fx_error = one_line(exc)
    if inputs is not None:
        candidates: InputCandidates | str = InputCandidates([(inputs, inputs_origin)])
    else:
        candidates = input_candidates(model, trace)
    base = dict(class_name=name, class_file=class_file, class_line=class_line, source=source,
                call_line=call_line, origin_file=origin_file)
    run_error = None
    if isinstance(candidates, InputCandidates):
        for example, origin in candidates.tuples:
            prepared = _prepared(example)
            try:
                if trace is not None:
                    view = run_fx(model, trace, prepared)
                    method = "fx"
                else:
                    view = run_autograd(model, prepared)
                    method = "autograd"
            except Exception as exc:  # noqa: BLE001 - the model's own forward failed on this input
                run_error = run_error or f"running it on {', '.join(str(s) for s in spec_of(example))} " \
                                         f"failed: {one_line(exc)}"
                continue
            modules = with_regions(model, module_facts_from_autograd(model, view, describe), prepared)
            return ModelFacts(**base, method=method, fx_error=fx_error, autograd=True,
                              inputs=spec_of(example), inputs_origin=origin, modules=with_bases(model, modules))
        reason = run_error or "no example input"
    else:
        reason = f"no example input: {candidates}"
    if trace is not None:
        return ModelFacts(**base, method="fx", autograd=False, note=reason,
                          modules=with_bases(model, with_regions(model, fx_only_facts(model, trace, describe), None)))
    raise AnalysisError(f"fx could not trace it ({fx_error}) and {reason}")


def with_regions(model: nn.Module, modules: list[ModuleFacts], inputs: tuple[Any, ...] | None) -> list[ModuleFacts]:
    """The module facts with where each forward runs: compiled by the model
    itself, inside an activation-checkpointed region (docs/compile.md)."""
    from dataclasses import replace

    from hooklint.graph.regions import checkpointed_paths, compiled_paths

    compiled = compiled_paths(model)
    checkpointed = checkpointed_paths(model, inputs)
    if not compiled and not checkpointed:
        return modules
    return [replace(m, compiled=m.path in compiled,
                    checkpointed=checkpointed.get(m.path, "") if checkpointed is not None else None)
            for m in modules]


def with_bases(model: nn.Module, modules: list[ModuleFacts]) -> tuple[ModuleFacts, ...]:
    """Each module's facts with the names of its class's bases (for ``isinstance``
    filters of library code, which keep subclasses)."""
    from dataclasses import replace

    classes = {path: type(module) for path, module in model.named_modules(remove_duplicate=False)}
    out = []
    for facts in modules:
        cls = classes.get(facts.path)
        if cls is None:
            out.append(facts)
            continue
        bases = tuple(c.__name__ for c in cls.__mro__[1:] if c not in (nn.Module, object))
        out.append(replace(facts, bases=bases) if bases else facts)
    return tuple(out)


def one_line(exc: BaseException, limit: int = 240) -> str:
    """``Type: first line of the message``, shortened (fx appends pages of context)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
