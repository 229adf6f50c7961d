"""Hook state kept per device and rebound by its owner (HKL344).

``nn.DataParallel`` copies the wrapped module for each device with
``Module._replicate_for_data_parallel``: a shallow copy of the instance
dict, so every replica holds the *same* hook dicts (the hooks run on every
replica) and the same attribute values, but an attribute a replica assigns
is its own.  A hook bound to an object (a method of its class, a function
that reaches it through ``self``) therefore always writes into the
*original* object's attributes.  A hook that files its output under the
input's device (``self.hidden[x.device] = out``) is written to be shared by
replicas on several devices; a method of the same class that starts each
call by rebinding that attribute to a new container (``self.hidden = {}``)
detaches the replica from the container the hook writes into.

This module finds, in a class, the attributes its hooks store into keyed by
a device (or a thread), and the methods other than ``__init__`` that rebind
them to a new empty container.  Nothing here imports torch or runs code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.bodies import body_nodes, param_names
from hooklint.static.semantic import ClassInfo, SemanticModel

# What says a key names the device (or the thread) a call runs on.
_DEVICE_ATTRS = frozenset({"device", "get_device"})
_DEVICE_CALLS = frozenset({"current_device", "get_ident", "get_native_id", "current_thread"})
_FILLS = frozenset({"append", "extend", "add", "update", "insert"})
_NEW_CONTAINERS = frozenset({"dict", "list", "defaultdict", "OrderedDict", "set"})


@dataclass
class DeviceStore:
    attr: str
    node: ast.AST  # the store in the hook
    key: str  # the key's source


@dataclass
class Rebind:
    attr: str
    node: ast.Assign
    method: str


def _names_device(expr: ast.AST, device_names: set[str]) -> bool:
    for sub in ast.walk(expr):
        if isinstance(sub, ast.Attribute) and sub.attr in _DEVICE_ATTRS:
            return True
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in _DEVICE_CALLS:
                return True
        if isinstance(sub, ast.Name) and sub.id in device_names:
            return True
    return False


def _self_attr(expr: ast.AST, names: frozenset[str]) -> str | None:
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in names:
        return expr.attr
    return None


def hook_object_names(model: SemanticModel, hook: ast.AST) -> tuple[ClassInfo, frozenset[str]] | None:
    """The class a hook is bound to (a method of it, or a function nested in one
    of its methods that reaches the object through ``self``) and that name."""
    owner = model.enclosing_class(hook)
    if owner is None:
        return None
    method = next((m for m in owner.methods.values() if m is hook or any(sub is hook for sub in ast.walk(m))), None)
    params = param_names(method) if method is not None else []
    if not params or params[0] != "self":
        return None
    return owner, frozenset({"self"})


def device_stores(hook: ast.AST, names: frozenset[str]) -> list[DeviceStore]:
    """Stores the hook makes into ``self.<attr>`` under a key that names a device or thread."""
    device_names: set[str] = set()
    out = []
    for node in body_nodes(hook):
        if isinstance(node, ast.Assign):
            if _names_device(node.value, set()) and all(isinstance(t, ast.Name) for t in node.targets):
                device_names.update(t.id for t in node.targets)  # type: ignore[attr-defined]
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    attr = _self_attr(target.value, names)
                    if attr is not None and _names_device(target.slice, device_names):
                        out.append(DeviceStore(attr, node, ast.unparse(target.slice)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            if node.func.attr in ("setdefault", "__setitem__") and node.args:
                attr = _self_attr(receiver, names)
                if attr is not None and _names_device(node.args[0], device_names):
                    out.append(DeviceStore(attr, node, ast.unparse(node.args[0])))
            elif node.func.attr in _FILLS and isinstance(receiver, ast.Subscript):
                # `self.maps[threading.get_ident()].append(out)`: the entry of a default dict filled
                attr = _self_attr(receiver.value, names)
                if attr is not None and _names_device(receiver.slice, device_names):
                    out.append(DeviceStore(attr, node, ast.unparse(receiver.slice)))
    return out


def _is_new_container(value: ast.AST) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        return name in _NEW_CONTAINERS
    return False


def rebinds(owner: ClassInfo, attr: str) -> list[Rebind]:
    """Assignments of a new container to ``self.<attr>`` in methods other than
    ``__init__`` (which runs before any replica exists)."""
    out = []
    for name, method in owner.methods.items():
        if name == "__init__":
            continue
        for node in body_nodes(method):
            if not isinstance(node, ast.Assign):
                continue
            pairs = [(target, node.value) for target in node.targets]
            for target, value in list(pairs):
                # `old, self.x = self.x, []`: the tuple's elements pair up
                if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                        and len(target.elts) == len(value.elts):
                    pairs.extend(zip(target.elts, value.elts))
            if any(_self_attr(target, frozenset({"self"})) == attr and _is_new_container(value)
                   for target, value in pairs):
                out.append(Rebind(attr, node, name))
    return out
