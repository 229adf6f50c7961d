"""Saved-tensor hooks (`torch.autograd.graph.saved_tensors_hooks`): what a pack
side keeps of a saved tensor, and whether the unpack side can rebuild the same
tensor from it.

A pack hook may keep anything; its unpack hook must hand autograd back a
tensor with the values, shape and strides of the one saved.  Offloading
libraries break that in two ways this module describes as facts:

- a *storage key*: a saved tensor identified by its storage address
  (`data_ptr()`, `untyped_storage()`) without its shape and strides, used to
  file one copy per key and kept as the saved tensor's handle: every other
  view of that storage filed under the same key is served the first one's copy;
- a *layout record*: the original's `stride()` / `storage_offset()` kept
  with an element-wise copy of it (`empty_like(t)` + `copy_`, `t.cpu()`,
  `t.to(...)`, `t.clone()`), for an unpack that restores them with
  `as_strided`: the copy of a slice is compact and starts at offset 0, so
  the original's strides and offset do not describe it.

Never imports torch; reads the file's syntax only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from hooklint.static.tree_walk import walk_tree

# Names that only a file installing saved-tensor hooks spells.
SAVED_TENSOR_HOOK_APIS = frozenset({"saved_tensors_hooks", "_push_saved_tensors_default_hooks"})
TRIGGERS = ("saved_tensors_hooks", "saved_tensors_default_hooks")

# Calls whose value names a tensor's storage, not the tensor.
_STORAGE_CALLS = frozenset({"data_ptr", "untyped_storage", "storage", "_typed_storage", "_storage"})
_STORAGE_OBJECT_CALLS = frozenset({"untyped_storage", "storage", "_typed_storage"})
_SHAPE_CALLS = frozenset({"size", "numel"})
# Methods that copy a tensor's elements into a new tensor of their own layout
# (a slice's copy is compact, offset 0).
_ELEMENT_COPY_METHODS = frozenset({"cpu", "cuda", "to", "clone", "pin_memory", "npu", "xpu"})
_PASS_THROUGH_METHODS = frozenset({"detach", "contiguous", "view_as"}) | _ELEMENT_COPY_METHODS
_LIKE_FACTORIES = frozenset({"empty_like", "zeros_like", "ones_like"})
_NORMALIZING_METHODS = frozenset({"contiguous", "clone"})

Function = ast.FunctionDef | ast.AsyncFunctionDef


def uses_saved_tensor_hooks(tree: ast.Module) -> bool:
    """Does the file install saved-tensor hooks (the context manager, a subclass
    of it, or torch's default-hooks stack)?"""
    for node in walk_tree(tree):
        if isinstance(node, ast.Name) and node.id in SAVED_TENSOR_HOOK_APIS:
            return True
        if isinstance(node, ast.Attribute) and node.attr in SAVED_TENSOR_HOOK_APIS:
            return True
        if isinstance(node, ast.alias) and node.name.rsplit(".", 1)[-1] in SAVED_TENSOR_HOOK_APIS:
            return True
    return False


def own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's own body, not of the functions and classes it defines."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _assignments(func: ast.AST) -> dict[str, list[ast.expr]]:
    """Local name -> the values assigned to it anywhere in the function's own body."""
    out: dict[str, list[ast.expr]] = {}
    for node in own_nodes(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None \
                and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, []).append(node.value)
    return out


def _functions(tree: ast.Module) -> list[Function]:
    return [n for n in walk_tree(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _method_name(call: ast.Call) -> str | None:
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


_STORAGE_COPIES = frozenset({"cpu", "cuda", "to", "clone", "pin_memory", "share_memory_", "npu", "xpu"})


def _consumed_by_method(call: ast.Call) -> bool:
    """`t.untyped_storage().data_ptr()`, `.nbytes()`, `.device`: the storage is only asked
    something (its copies, `.cpu()`, `.clone()`, are storages too)."""
    parent = getattr(call, "_hl_parent", None)
    return isinstance(parent, ast.Attribute) and parent.value is call and parent.attr not in _STORAGE_COPIES


def _callee_name(call: ast.Call) -> str | None:
    """`helper(...)`, `self.helper(...)`, `Cls.helper(...)`: the name of a function of the file it may call."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        return call.func.attr
    return None


class LayoutFacts:
    """Which parts of a tensor's identity an expression carries: its storage
    (`data_ptr`, `untyped_storage`), its shape, its strides, its offset, or the
    view itself (`id(t)`: autograd saves each view as its own tensor object)."""

    def __init__(self, tree: ast.Module):
        self._by_name: dict[str, list[Function]] = {}
        for func in _functions(tree):
            self._by_name.setdefault(func.name, []).append(func)
        self._returns: dict[int, frozenset[str]] = {}
        self._assigned: dict[int, dict[str, list[ast.expr]]] = {}

    def assignments(self, func: ast.AST) -> dict[str, list[ast.expr]]:
        key = id(func)
        if key not in self._assigned:
            self._assigned[key] = _assignments(func)
        return self._assigned[key]

    def of(self, expr: ast.AST, func: ast.AST, _seen: frozenset[tuple[int, str]] = frozenset()) -> frozenset[str]:
        """``_seen``: (function id, name) of the locals and (0, name) of the callees being expanded."""
        parts: set[str] = set()
        stack = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.Attribute) and node.attr in {"shape", "_cdata"}:
                parts.add("shape" if node.attr == "shape" else "storage")
                continue  # what the receiver is made of is not part of the key
            if isinstance(node, ast.Subscript):
                stack.append(node.value)  # `cache[key]` is what was filed under the key, not the key
                continue
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "id" \
                    and len(node.args) == 1:
                arg = node.args[0]
                inner = _method_name(arg) if isinstance(arg, ast.Call) else None
                # id(t): the tensor object itself, one per view; id(t.untyped_storage()): its storage
                parts.add("storage" if inner in _STORAGE_CALLS else "view")
                continue
            if isinstance(node, ast.Call):
                method = _method_name(node)
                part = ("storage" if method in _STORAGE_CALLS else "stride" if method == "stride"
                        else "shape" if method in _SHAPE_CALLS else "offset" if method == "storage_offset" else None)
                if part is not None:
                    parts.add(part)
                    if method in _STORAGE_OBJECT_CALLS and not _consumed_by_method(node):
                        parts.add("storage-object")  # the storage itself, not its address or size
                    if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Call) \
                            and _method_name(node.func.value) in _STORAGE_CALLS:
                        parts.add("storage")  # t.untyped_storage().data_ptr()
                    stack.extend(node.args)
                    continue
                callee = _callee_name(node)
                if callee is not None and callee in self._by_name:
                    # a function of the file: its returns say what the value carries, not its arguments
                    if (0, callee) not in _seen:
                        for target in self._by_name[callee]:
                            parts |= self._returned(target, _seen | {(0, callee)})
                    continue
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and (id(func), node.id) not in _seen:
                for value in self.assignments(func).get(node.id, ()):
                    parts |= self.of(value, func, _seen | {(id(func), node.id)})
            stack.extend(ast.iter_child_nodes(node))
        return frozenset(parts)

    def _returned(self, func: Function, seen: frozenset[tuple[int, str]]) -> frozenset[str]:
        key = id(func)
        if key in self._returns:
            return self._returns[key]
        self._returns[key] = frozenset()  # a recursive call adds nothing
        parts: set[str] = set()
        for node in own_nodes(func):
            if isinstance(node, ast.Return) and node.value is not None:
                parts |= self.of(node.value, func, seen)
        self._returns[key] = frozenset(parts)
        return self._returns[key]


def is_storage_key(parts: frozenset[str]) -> bool:
    """Names a storage but not the view: two views of one storage can share it."""
    return "storage" in parts and "view" not in parts and not {"shape", "stride"} <= parts


def missing_layout(parts: frozenset[str]) -> list[str]:
    return [word for word, part in (("shape", "shape"), ("strides", "stride")) if part not in parts]


@dataclass(frozen=True)
class StorageKeyedCache:
    """`key = <storage address>`, `cache[key] = tensor`, and the key kept as the saved tensor's handle."""

    func: Function
    key: ast.AST             # the statement computing the key (or the key expression itself)
    name: str                # the key's local name (or the key as written)
    filed: ast.AST           # `cache[key] = ...` (or `cache.setdefault(key, ...)`)
    cache: str               # the cache as written
    kept: ast.AST            # where the key leaves the function as a handle
    missing: tuple[str, ...]


def _names_in_display(value: ast.AST) -> Iterator[ast.Name]:
    """A name itself, or the names that are items of a tuple/list display (one level deep)."""
    if isinstance(value, ast.Name):
        yield value
    elif isinstance(value, (ast.Tuple, ast.List)):
        for elt in value.elts:
            if isinstance(elt, ast.Name):
                yield elt
            elif isinstance(elt, (ast.Tuple, ast.List)):
                yield from (e for e in elt.elts if isinstance(e, ast.Name))


def _kept_as_handle(func: Function, name: str, facts: "LayoutFacts | None" = None) -> ast.AST | None:
    """Where the key leaves the function as a value: returned or yielded (the pack
    hook's result), stored in an attribute or a container (a state table),
    appended to a list or queue (a set of keys seen is bookkeeping, not a handle)."""
    for node in own_nodes(func):
        value: ast.AST | None = None
        if isinstance(node, (ast.Return, ast.Yield)) and node.value is not None:
            value = node.value
        elif isinstance(node, ast.Assign) and any(isinstance(t, (ast.Subscript, ast.Attribute)) for t in node.targets):
            value = node.value
        elif isinstance(node, ast.Call) and _method_name(node) in {"append", "put"} and node.args:
            value = node.args[0]
        if value is not None and any(n.id == name for n in _names_in_display(value)):
            if facts is not None and "stride" in facts.of(value, func, frozenset({(id(func), name)})):
                continue  # the handle carries the view's strides next to the key
            return node
    return None


def _filed_under(func: Function, name: str) -> tuple[ast.AST, str] | None:
    """`cache[name] = ...` or `cache.setdefault(name, ...)`: a value filed under the key."""
    for node in own_nodes(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Name) \
                        and target.slice.id == name:
                    return node, ast.unparse(target.value)
        elif isinstance(node, ast.Call) and _method_name(node) == "setdefault" and node.args \
                and isinstance(node.args[0], ast.Name) and node.args[0].id == name:
            assert isinstance(node.func, ast.Attribute)
            return node, ast.unparse(node.func.value)
    return None


def storage_keyed_caches(tree: ast.Module, facts: LayoutFacts | None = None) -> list[StorageKeyedCache]:
    facts = facts or LayoutFacts(tree)
    out: list[StorageKeyedCache] = []
    for func in _functions(tree):
        for node in own_nodes(func):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            name = node.targets[0].id
            parts = facts.of(node.value, func, frozenset({(id(func), name)}))
            if not is_storage_key(parts):
                continue
            filed = _filed_under(func, name)
            if filed is None:
                continue
            kept = _kept_as_handle(func, name, facts)
            if kept is None:
                continue
            out.append(StorageKeyedCache(func, node, name, filed[0], filed[1], kept, tuple(missing_layout(parts))))
        out.extend(_inline_keys(func, facts))
    out.sort(key=lambda c: (c.key.lineno, c.key.col_offset))
    return out


def _inline_keys(func: Function, facts: LayoutFacts) -> list[StorageKeyedCache]:
    """`cache[t.data_ptr()] = ...` and `return t.data_ptr()`: the key spelled out where it is used."""
    filed: dict[str, tuple[ast.AST, ast.AST, str]] = {}   # key text -> (key expression, filing, cache)
    for node in own_nodes(func):
        key = cache = None
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Call):
                    key, cache = target.slice, ast.unparse(target.value)
        elif isinstance(node, ast.Call) and _method_name(node) == "setdefault" and node.args \
                and isinstance(node.args[0], ast.Call):
            assert isinstance(node.func, ast.Attribute)
            key, cache = node.args[0], ast.unparse(node.func.value)
        if key is not None and cache is not None and is_storage_key(facts.of(key, func)):
            filed.setdefault(ast.unparse(key), (key, node, cache))
    out = []
    for node in own_nodes(func):
        if isinstance(node, ast.Return) and node.value is not None:
            values = [node.value] + (list(node.value.elts) if isinstance(node.value, ast.Tuple) else [])
            for value in values:
                hit = filed.get(ast.unparse(value))
                if hit is not None:
                    key, filing, cache = hit
                    parts = facts.of(key, func)
                    out.append(StorageKeyedCache(func, key, ast.unparse(key), filing, cache, node,
                                                 tuple(missing_layout(parts))))
                    break
    return out


@dataclass(frozen=True)
class Restride:
    """An `as_strided` (or `set_(storage, offset, size, stride)`) call whose strides or offset are
    values, not a literal layout."""

    call: ast.Call


def restrides(tree: ast.Module) -> list[Restride]:
    out = []
    for node in walk_tree(tree):
        method = _method_name(node) if isinstance(node, ast.Call) else None
        if method not in {"as_strided", "set_"}:
            continue
        func = node.func
        assert isinstance(func, ast.Attribute)
        on_torch = isinstance(func.value, ast.Name) and func.value.id == "torch"
        if method == "set_":  # t.set_(source, storage_offset, size, stride)
            positions = {"stride": 3, "storage_offset": 1}
        elif on_torch:
            positions = {"stride": 2, "storage_offset": 3}
        else:
            positions = {"stride": 1, "storage_offset": 2}
        layout: list[ast.AST] = []
        for keyword, index in positions.items():
            kw = next((k.value for k in node.keywords if k.arg == keyword), None)
            if kw is None and len(node.args) > index:
                kw = node.args[index]
            if kw is not None:
                layout.append(kw)
        if any(not _literal(value) for value in layout):
            out.append(Restride(node))
    return out


def _literal(value: ast.AST) -> bool:
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _chain_root(expr: ast.AST, methods: frozenset[str]) -> tuple[ast.AST, set[str]]:
    """`t.detach().to("cpu")` -> (`t`, {"detach", "to"}): the receiver under a chain of those methods."""
    seen: set[str] = set()
    while isinstance(expr, ast.Call) and _method_name(expr) in methods:
        assert isinstance(expr.func, ast.Attribute)
        seen.add(expr.func.attr)
        expr = expr.func.value
    return expr, seen


def element_copy_of(expr: ast.AST) -> str | None:
    """The name of the tensor whose elements ``expr`` copies into a tensor of its own layout."""
    root, methods = _chain_root(expr, _PASS_THROUGH_METHODS)
    if isinstance(root, ast.Name) and methods & _ELEMENT_COPY_METHODS:
        return root.id
    if isinstance(expr, ast.Call):
        name = expr.func.attr if isinstance(expr.func, ast.Attribute) else \
            expr.func.id if isinstance(expr.func, ast.Name) else None
        if name in _LIKE_FACTORIES and expr.args and isinstance(expr.args[0], ast.Name):
            return expr.args[0].id
    return None


def _layout_read(expr: ast.AST) -> tuple[str, str] | None:
    """`t.stride()` / `t.storage_offset()` -> (`t`, what)."""
    if isinstance(expr, ast.Call) and _method_name(expr) in {"stride", "storage_offset"} and not expr.args:
        assert isinstance(expr.func, ast.Attribute)
        if isinstance(expr.func.value, ast.Name):
            return expr.func.value.id, expr.func.attr
    return None


def _normalizes_layout(func: Function, tensor: str) -> bool:
    """Does the function test the tensor's contiguity or replace it by a compact copy
    before recording its layout (the fix: record the copy's own strides)?"""
    for node in own_nodes(func):
        if isinstance(node, ast.Call) and _method_name(node) == "is_contiguous":
            assert isinstance(node.func, ast.Attribute)
            if isinstance(node.func.value, ast.Name) and node.func.value.id == tensor:
                return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == tensor for t in node.targets):
            root, methods = _chain_root(node.value, _PASS_THROUGH_METHODS)
            if isinstance(root, ast.Name) and root.id == tensor and methods & _NORMALIZING_METHODS:
                return True
    return False


@dataclass(frozen=True)
class LayoutRecord:
    """The original tensor's strides/offset kept next to an element-wise copy of it."""

    func: Function
    tensor: str               # the saved tensor's local name
    record: ast.AST           # `stride = t.stride()` (the first such record), or the read itself
    what: tuple[str, ...]     # "stride", "storage_offset"
    copy: ast.AST             # the copy's expression
    kept: ast.AST             # the tuple/list holding both


def layout_records(tree: ast.Module, facts: LayoutFacts | None = None) -> list[LayoutRecord]:
    facts = facts or LayoutFacts(tree)
    out: list[LayoutRecord] = []
    for func in _functions(tree):
        assigned = facts.assignments(func)
        records: dict[str, tuple[str, str, ast.AST]] = {}      # local -> (tensor, what, statement)
        for node in own_nodes(func):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target = node.targets[0]
            pairs = [(target, node.value)] if isinstance(target, ast.Name) else \
                list(zip(target.elts, node.value.elts)) if isinstance(target, ast.Tuple) \
                and isinstance(node.value, ast.Tuple) and len(target.elts) == len(node.value.elts) else []
            for name, value in pairs:
                read = _layout_read(value)
                if read is not None and isinstance(name, ast.Name) and name.id not in records:
                    records[name.id] = (read[0], read[1], node)
        copies: dict[str, tuple[str, ast.AST]] = {}              # local -> (tensor copied, expression)
        for local, values in assigned.items():
            for value in values:
                copied = element_copy_of(value)
                if copied is not None:
                    copies.setdefault(local, (copied, value))
        for node in own_nodes(func):
            if isinstance(node, (ast.Tuple, ast.List)):
                items = list(node.elts)
            elif isinstance(node, ast.Dict):
                items = list(node.values)
            else:
                continue
            kept_layout: dict[str, list[tuple[str, ast.AST]]] = {}
            kept_copy: dict[str, ast.AST] = {}
            for elt in items:
                read = _layout_read(elt)
                if isinstance(elt, ast.Name) and elt.id in records:
                    tensor, what, statement = records[elt.id]
                    kept_layout.setdefault(tensor, []).append((what, statement))
                elif read is not None:  # `(host, t.stride(), t.storage_offset())`
                    kept_layout.setdefault(read[0], []).append((read[1], elt))
                elif isinstance(elt, ast.Name) and elt.id in copies:
                    kept_copy.setdefault(copies[elt.id][0], copies[elt.id][1])
                else:
                    copied = element_copy_of(elt)
                    if copied is not None:
                        kept_copy.setdefault(copied, elt)
            for tensor, recorded in kept_layout.items():
                if tensor not in kept_copy or _normalizes_layout(func, tensor):
                    continue
                first = min((statement for _what, statement in recorded), key=lambda s: (s.lineno, s.col_offset))
                what = tuple(sorted({w for w, _s in recorded}, key=lambda w: w != "stride"))
                out.append(LayoutRecord(func, tensor, first, what, kept_copy[tensor], node))
    seen: set[int] = set()
    unique = []
    for record in sorted(out, key=lambda r: (r.record.lineno, r.record.col_offset)):
        if id(record.record) not in seen:
            seen.add(id(record.record))
            unique.append(record)
    return unique


# ------------------------------------------------------------------ pack hooks

def _hook_pairs(tree: ast.Module) -> list[tuple[ast.AST, ast.AST]]:
    """(pack, unpack) as passed to `saved_tensors_hooks(pack, unpack)`, to torch's
    default-hooks stack, or to `super().__init__(pack, unpack)` in a subclass."""
    out = []
    for node in walk_tree(tree):
        if not (isinstance(node, ast.Call) and len(node.args) >= 2):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in SAVED_TENSOR_HOOK_APIS:
            out.append((node.args[0], node.args[1]))
        elif name == "__init__" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) \
                and isinstance(func.value.func, ast.Name) and func.value.func.id == "super":
            cls = getattr(node, "_hl_parent", None)
            while cls is not None and not isinstance(cls, ast.ClassDef):
                cls = getattr(cls, "_hl_parent", None)
            if cls is not None and any(ast.unparse(b).rsplit(".", 1)[-1] in SAVED_TENSOR_HOOK_APIS for b in cls.bases):
                out.append((node.args[0], node.args[1]))
    return out


def _function_for(expr: ast.AST, functions: dict[str, list[Function]]) -> list[ast.AST]:
    """The function a hook argument names: `pack`, `self.pack`, a lambda."""
    if isinstance(expr, ast.Lambda):
        return [expr]
    if isinstance(expr, ast.Name):
        return list(functions.get(expr.id, ()))
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return list(functions.get(expr.attr, ()))
    return []


@dataclass(frozen=True)
class StorageHandle:
    """A pack hook that returns the saved tensor's storage without its strides or offset."""

    pack: ast.AST
    returned: ast.AST          # the return (or the lambda's body)
    missing: tuple[str, ...]


def storage_handles(tree: ast.Module, facts: LayoutFacts | None = None) -> list[StorageHandle]:
    facts = facts or LayoutFacts(tree)
    functions: dict[str, list[Function]] = {}
    for func in _functions(tree):
        functions.setdefault(func.name, []).append(func)
    out: list[StorageHandle] = []
    seen: set[int] = set()
    for pack, _unpack in _hook_pairs(tree):
        for func in _function_for(pack, functions):
            if id(func) in seen:
                continue
            seen.add(id(func))
            returns = [func.body] if isinstance(func, ast.Lambda) else \
                [n.value for n in own_nodes(func) if isinstance(n, ast.Return) and n.value is not None]
            for value in returns:
                parts = facts.of(value, func)
                if "storage-object" not in parts:
                    continue
                missing = tuple(w for w, p in (("strides", "stride"), ("storage offset", "offset")) if p not in parts)
                if missing:
                    out.append(StorageHandle(func, getattr(value, "_hl_parent", value), missing))
    return out


def hook_function_pairs(tree: ast.Module) -> list[tuple[ast.AST, ast.AST, ast.Call | None]]:
    """(pack, unpack, the call installing them) for each pair of saved-tensor hooks whose two
    functions the file defines, each named once (a lambda, a function or a method of that name)."""
    functions: dict[str, list[Function]] = {}
    for func in _functions(tree):
        functions.setdefault(func.name, []).append(func)
    out: list[tuple[ast.AST, ast.AST, ast.Call | None]] = []
    seen: set[tuple[int, int]] = set()
    for pack_expr, unpack_expr in _hook_pairs(tree):
        packs, unpacks = _own_method(pack_expr) or _function_for(pack_expr, functions), \
            _own_method(unpack_expr) or _function_for(unpack_expr, functions)
        if len(packs) != 1 or len(unpacks) != 1 or (id(packs[0]), id(unpacks[0])) in seen:
            continue
        seen.add((id(packs[0]), id(unpacks[0])))
        call = getattr(pack_expr, "_hl_parent", None)
        out.append((packs[0], unpacks[0], call if isinstance(call, ast.Call) else None))
    return out


def _own_method(expr: ast.AST) -> list[ast.AST]:
    """`self.pack` passed inside a class: that class's own method of the name (several classes of a file
    may each define a `pack`)."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        return []
    cls = getattr(expr, "_hl_parent", None)
    while cls is not None and not isinstance(cls, ast.ClassDef):
        cls = getattr(cls, "_hl_parent", None)
    if cls is None:
        return []
    return [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == expr.attr]
