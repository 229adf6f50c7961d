"""Forward hooks that read an element of the output a module can return as None.

A forward hook's ``output`` is what ``forward`` returned.  Attention modules
with a fast path return ``(out, weights)`` and put None in the weights slot
when that path runs, because ``F.scaled_dot_product_attention`` never
materialises the weights:

- openai-whisper's ``MultiHeadAttention`` (``ResidualAttentionBlock.attn``
  and ``.cross_attn`` of ``model.encoder.blocks`` / ``model.decoder.blocks``)
  returns ``(out, None)`` while the class attribute ``use_sdpa`` is True,
  its default since release 20240930; ``whisper.model.disable_sdpa()`` turns
  it off for a block of code;
- a class of the file whose ``forward`` returns a tuple with None in a slot
  on some path (a literal None, a name assigned None, or a slot of what a
  method of the class returns that is None on some path);
- ``nn.MultiheadAttention`` called with ``need_weights=False``.

A hook that reads that slot (``output[1]``, ``output[-1]``, unpacking) and
tests nothing against None stores or uses None (tests/behaviour/
test_attention_slots.py runs all three).  For openai-whisper the module's
class is outside the file: it is known from the path (``.attn`` or
``.cross_attn`` of an element of ``<root>.encoder.blocks`` /
``<root>.decoder.blocks``) together with the file importing ``whisper`` or
the root being annotated ``Whisper``; and the hook is reported only when a
call that runs the model (``model(...)``, ``model.decoder(...)``,
``model.transcribe(...)``) follows the registration in the same function
outside a ``with`` block whose context names ``sdpa``, and nothing there
sets ``use_sdpa = False``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.static.flow import executed_nodes, function_of
from hooklint.static.semantic import FunctionNode

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext
    from hooklint.static.hooks import Registration

WHISPER_ATTENTION_ATTRS = frozenset({"attn", "cross_attn"})
WHISPER_STACKS = frozenset({"encoder", "decoder"})
# Methods of a model that do not run its forward.
_NOT_RUNNING = frozenset({
    "to", "cpu", "cuda", "half", "float", "double", "bfloat16", "eval", "train", "parameters", "named_parameters",
    "modules", "named_modules", "children", "named_children", "buffers", "named_buffers", "state_dict",
    "load_state_dict", "apply", "requires_grad_", "zero_grad", "get_submodule", "type", "register_buffer",
})


@dataclass(frozen=True)
class NoneSlotRead:
    node: ast.AST  # the read: `outs[-1]` / the unpacking target
    module: str  # words for the module and when the slot is None
    unguarded_run: ast.Call | None = None  # for library modules: the call that runs the model with the fast path on


def _const_index(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) is int:
        return -node.operand.value
    return None


def _hook_body(ctx: "FileContext", reg: "Registration") -> tuple[ast.AST, str] | None:
    """The function whose body reads the output, and its output parameter: the
    hook itself, or the local function a lambda hook hands its arguments to."""
    hook = reg.hook
    if hook is None or hook.has_varargs or not isinstance(hook.node, FunctionNode + (ast.Lambda,)):
        return None
    output = reg.param("output")
    if output is None:
        return None
    node = hook.node
    if isinstance(node, ast.Lambda) and isinstance(node.body, ast.Call) and isinstance(node.body.func, ast.Name):
        positions = [i for i, a in enumerate(node.body.args) if isinstance(a, ast.Name) and a.id == output]
        target = _local_def(node, node.body.func.id)
        if positions and target is not None:
            params = [a.arg for a in target.args.posonlyargs + target.args.args]
            if positions[0] < len(params):
                return target, params[positions[0]]
    return node, output


def _local_def(at: ast.AST, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    scope = function_of(at)
    while True:
        body = scope.body if isinstance(scope, FunctionNode) else None
        if scope is None:
            root = at
            while getattr(root, "_hl_parent", None) is not None:
                root = root._hl_parent  # type: ignore[attr-defined]
            body = getattr(root, "body", [])
        for stmt in body or []:
            if isinstance(stmt, FunctionNode) and stmt.name == name:
                return stmt
        if scope is None:
            return None
        scope = function_of(scope)


def _slot_reads(fn: ast.AST, output: str) -> list[tuple[ast.AST, int, int | None]]:
    """(node, index, tuple size when unpacked) for each read of a slot of ``output``."""
    reads: list[tuple[ast.AST, int, int | None]] = []
    for node in executed_nodes(fn):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == output \
                and isinstance(node.ctx, ast.Load):
            index = _const_index(node.slice)
            if index is not None:
                reads.append((node, index, None))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id == output:
            for target in node.targets:
                if isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in target.elts):
                    for i, elt in enumerate(target.elts):
                        if not (isinstance(elt, ast.Name) and elt.id == "_"):
                            reads.append((elt, i, len(target.elts)))
    return reads


def _tests_none(fn: ast.AST) -> bool:
    for node in executed_nodes(fn):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops) \
                and any(isinstance(c, ast.Constant) and c.value is None for c in [node.left] + node.comparators):
            return True
    return False


# --- classes of the file -------------------------------------------------------------------------------------------

def _none_slots_of(fn: ast.AST, cls, depth: int = 0) -> tuple[set[int], set[int]]:
    """(sizes of the tuples ``fn`` returns, slots that are None on some path)."""
    sizes: set[int] = set()
    none: set[int] = set()
    none_names = {t.id for n in executed_nodes(fn) if isinstance(n, ast.Assign)
                  and isinstance(n.value, ast.Constant) and n.value.value is None
                  for t in n.targets if isinstance(t, ast.Name)}
    from_methods: dict[str, tuple[str, int]] = {}
    for n in executed_nodes(fn):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Attribute) \
                and isinstance(n.value.func.value, ast.Name) and n.value.func.value.id == "self":
            for t in n.targets:
                if isinstance(t, ast.Tuple):
                    for i, e in enumerate(t.elts):
                        if isinstance(e, ast.Name):
                            from_methods[e.id] = (n.value.func.attr, i)
    for n in executed_nodes(fn):
        if not isinstance(n, ast.Return) or not isinstance(n.value, ast.Tuple):
            continue
        sizes.add(len(n.value.elts))
        for i, e in enumerate(n.value.elts):
            if isinstance(e, ast.Constant) and e.value is None:
                none.add(i)
            elif isinstance(e, ast.Name) and e.id in none_names:
                none.add(i)
            elif isinstance(e, ast.Name) and e.id in from_methods and depth == 0 and cls is not None:
                method, slot = from_methods[e.id]
                helper = cls.method(method)
                if helper is not None and slot in _none_slots_of(helper, cls, depth + 1)[1]:
                    none.add(i)
    return sizes, none


def _local_class_slots(ctx: "FileContext", reg: "Registration") -> tuple[str, set[int], set[int]] | None:
    value = reg.receiver_value
    info = getattr(value, "local_class", None)
    if info is None:
        return None
    forward = info.method("forward")
    if forward is None:
        return None
    for other in ctx.model.classes.values():
        if other is not info and info.name in [b.rsplit(".", 1)[-1] for b in other.bases if b] \
                and other.method("forward") is not None:
            return None
    sizes, none = _none_slots_of(forward, info)
    if not none or len(sizes) != 1:
        return None
    return f"`{info.name}`, whose `forward` returns None in that slot on some path", sizes, none


def _mha_without_weights(ctx: "FileContext", reg: "Registration") -> tuple[str, set[int], set[int]] | None:
    if getattr(reg.receiver_value, "torch_class", None) != "torch.nn.MultiheadAttention" or reg.receiver is None:
        return None
    text = ast.unparse(reg.receiver)
    scope: ast.AST = ctx.tree
    if text.startswith("self."):  # `self.attn` means this class's attribute only
        cur = getattr(reg.call, "_hl_parent", None)
        while cur is not None and not isinstance(cur, ast.ClassDef):
            cur = getattr(cur, "_hl_parent", None)
        if cur is None:
            return None
        scope = cur
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == text and any(
                k.arg == "need_weights" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in node.keywords):
            return (f"`nn.MultiheadAttention`, called with `need_weights=False` (line {node.lineno}): "
                    f"its weights slot is None", {2}, {1})
    return None


TORCH_TRANSFORMER_LAYERS = frozenset({"torch.nn.TransformerEncoderLayer", "torch.nn.TransformerDecoderLayer"})
TORCH_TRANSFORMER_STACKS = frozenset({"torch.nn.TransformerEncoder", "torch.nn.TransformerDecoder"})


def _torch_layer_attention(ctx: "FileContext", reg: "Registration") -> tuple[str, set[int], set[int]] | None:
    """``.self_attn`` / ``.multihead_attn`` of a torch Transformer layer (built in the file, or an
    element of ``.layers`` of a torch TransformerEncoder / TransformerDecoder built in the file): the
    layer calls them with ``need_weights=False`` (torch/nn/modules/transformer.py)."""
    recv = reg.receiver
    if not isinstance(recv, ast.Attribute) or recv.attr not in ("self_attn", "multihead_attn"):
        return None
    base = recv.value
    layer = getattr(ctx.inference.infer(base), "torch_class", None)
    if layer not in TORCH_TRANSFORMER_LAYERS:
        stack = base.value if isinstance(base, ast.Subscript) else (
            _loop_source(reg.call, base.id) if isinstance(base, ast.Name) else None)
        if isinstance(stack, ast.Call) and isinstance(stack.func, ast.Name) and stack.func.id == "enumerate" \
                and stack.args:
            stack = stack.args[0]
        if not (isinstance(stack, ast.Attribute) and stack.attr == "layers"
                and getattr(ctx.inference.infer(stack.value), "torch_class", None) in TORCH_TRANSFORMER_STACKS):
            return None
        layer = getattr(ctx.inference.infer(stack.value), "torch_class", "")
        layer = layer + "Layer"
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == recv.attr:
            return None  # the attention is also called directly, with its own arguments
        if isinstance(node, ast.Call) and any(
                k.arg == "need_weights" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                for k in node.keywords) and ast.unparse(node.func).rsplit(".", 1)[-1] in (
                    "partial", "forward", recv.attr):
            return None  # the file patches the attention to return weights (`partial(..., need_weights=True)`)
        if isinstance(node, ast.Constant) and node.value == "need_weights":
            return None  # `kwargs["need_weights"] = True` in a wrapper
    return (f"the `nn.MultiheadAttention` `{recv.attr}` of an `nn.{layer.rsplit('.', 1)[-1]}`, which calls it "
            f"with `need_weights=False`: its weights slot is always None", {2}, {1})


# --- openai-whisper ------------------------------------------------------------------------------------------------

def _whisper_root(reg: "Registration") -> tuple[ast.Name, str] | None:
    """``model`` for a registration on ``<x>.cross_attn`` / ``.attn`` with ``x`` an element of
    ``model.decoder.blocks`` / ``model.encoder.blocks`` (indexed, or the target of a loop over it)."""
    recv = reg.receiver
    if not isinstance(recv, ast.Attribute) or recv.attr not in WHISPER_ATTENTION_ATTRS:
        return None
    base = recv.value
    if isinstance(base, ast.Subscript):
        stack = base.value
    elif isinstance(base, ast.Name):
        stack = _loop_source(reg.call, base.id)
    else:
        return None
    if isinstance(stack, ast.Call) and isinstance(stack.func, ast.Name) and stack.func.id == "enumerate" \
            and stack.args:
        stack = stack.args[0]
    if not (isinstance(stack, ast.Attribute) and stack.attr == "blocks" and isinstance(stack.value, ast.Attribute)
            and stack.value.attr in WHISPER_STACKS):
        return None
    root = stack.value.value
    while isinstance(root, ast.Attribute):
        root = root.value
    return (root, stack.value.attr) if isinstance(root, ast.Name) else None


def _loop_source(at: ast.AST, name: str) -> ast.AST | None:
    cur = getattr(at, "_hl_parent", None)
    while cur is not None and not isinstance(cur, FunctionNode):
        if isinstance(cur, (ast.For, ast.AsyncFor)) or isinstance(cur, ast.comprehension):
            names = [n.id for n in ast.walk(cur.target) if isinstance(n, ast.Name)]
            if name in names:
                return cur.iter
        if isinstance(cur, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            for gen in cur.generators:
                if name in [n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)]:
                    return gen.iter
        cur = getattr(cur, "_hl_parent", None)
    return None


def _is_whisper_model(ctx: "FileContext", root: ast.Name, at: ast.AST) -> bool:
    for bindings in ctx.model.module_scope.bindings.values():
        for b in bindings:
            if b.kind == "import" and isinstance(b.value, str) and b.value.split(".")[0] == "whisper":
                return True
    fn = function_of(at)
    while fn is not None:
        if isinstance(fn, FunctionNode):
            for arg in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs:
                if arg.arg == root.id and arg.annotation is not None:
                    ann = arg.annotation
                    text = ann.value if isinstance(ann, ast.Constant) and isinstance(ann.value, str) else ast.unparse(ann)
                    return text.rsplit(".", 1)[-1].strip("'\" ") == "Whisper"
        fn = function_of(fn)
    return False


def _under_sdpa_switch(node: ast.AST) -> bool:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, FunctionNode):
        if isinstance(cur, (ast.With, ast.AsyncWith)) and any("sdpa" in ast.unparse(item.context_expr).lower()
                                                              for item in cur.items):
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def _unguarded_run(ctx: "FileContext", reg: "Registration", root: str, stack: str) -> ast.Call | None:
    scope = function_of(reg.call)
    if not isinstance(scope, FunctionNode):
        return None
    for node in executed_nodes(scope):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "use_sdpa"
                                                for t in node.targets):
            return None
    after = (reg.call.lineno, reg.call.col_offset)
    for node in executed_nodes(scope):
        if not isinstance(node, ast.Call) or (node.lineno, node.col_offset) <= after:
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "remove" and not node.args:
            return None  # the hooks' handles are removed: later runs do not reach the hook
        if isinstance(func, ast.Name) and func.id == root:
            pass
        elif isinstance(func, ast.Attribute) and func.attr not in _NOT_RUNNING and not func.attr.startswith(
                ("register_", "set_", "named_")):
            chain = func.value
            while isinstance(chain, ast.Attribute):
                chain = chain.value
            # `model.transcribe(...)`, `model.decoder(...)`, `model.decoder.forward(...)`; the encoder
            # never runs the decoder's blocks
            runs_stack = func.attr == stack if isinstance(func.value, ast.Name) and func.attr in WHISPER_STACKS \
                else isinstance(func.value, ast.Name) or (
                    isinstance(func.value, ast.Attribute) and func.value.attr == stack)
            if not (isinstance(chain, ast.Name) and chain.id == root and runs_stack):
                continue
        else:
            continue
        if not _under_sdpa_switch(node):
            return node
    return None


def none_slot_reads(ctx: "FileContext", reg: "Registration") -> list[NoneSlotRead]:
    body = _hook_body(ctx, reg)
    if body is None:
        return []
    fn, output = body
    reads = _slot_reads(fn, output)
    if not reads or _tests_none(fn):
        return []
    whisper = _whisper_root(reg)
    if whisper is not None and _is_whisper_model(ctx, whisper[0], reg.call):
        run = _unguarded_run(ctx, reg, whisper[0].id, whisper[1])
        if run is None:
            return []
        words = ("openai-whisper's `MultiHeadAttention`, which returns `(out, None)` while "
                 "`MultiHeadAttention.use_sdpa` is True (the default since release 20240930)")
        return [NoneSlotRead(node, words, run) for node, index, size in reads
                if index in (1, -1) and size in (None, 2)][:1]
    known = _local_class_slots(ctx, reg) or _mha_without_weights(ctx, reg) or _torch_layer_attention(ctx, reg)
    if known is None:
        return []
    words, sizes, none = known
    (n,) = sizes
    out = []
    for node, index, size in reads:
        if size is not None and size != n:
            continue
        if index % n in none if -n <= index < n else False:
            out.append(NoneSlotRead(node, words))
    return out[:1]
