"""Hand-written recursive walks over a module's children, and the hooks they register per visit.

``nn.Module.modules()`` and ``named_modules()`` keep a memo: a module reachable
through two parents (a layer reused in two blocks, tied sub-blocks) is yielded
once.  A function that recurses over ``children()`` / ``named_children()`` /
``_modules`` itself has no such memo: it reaches a shared module once per
parent, and whatever it does there (register a hook) it does that many times.
This module finds such walkers, what they register on the module they visit
(directly, through helpers, or through a callback they are handed), and
whether they remember what they visited.  It never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.core import Core
from hooklint.static.core import places as P
from hooklint.static.semantic import FunctionNode, SemanticModel, positional_params
from hooklint.static.tree_walk import child_nodes, walk, walk_tree
from hooklint.static.values import ModuleValue

# Iterations over the direct children of a module, and where the child sits in each item.
_CHILD_ITERATORS = {"children": (), "named_children": (1,)}
_MODULES_DICT = {"values": (), "items": (1,)}
# Module hook kinds (summary strings): a tensor hook on a shared parameter is another matter.
MODULE_KINDS = frozenset({"forward", "forward-pre", "backward-legacy", "full-backward", "full-backward-pre"})
# Attributes through which a registering function can see the hooks a module already holds.
_HOOK_DICTS = frozenset({"_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                         "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs"})


@dataclass(frozen=True)
class Walk:
    """``func`` recurses into each child of its parameter ``param`` (position ``index``)."""

    func: ast.FunctionDef | ast.AsyncFunctionDef
    param: str
    index: int  # among the positional parameters (self included for a method)
    loop: ast.AST  # the For or comprehension over the children
    child: str  # the loop variable naming the child
    iterator: str  # how the children are listed, as written (`module.named_children()`)
    recursion: ast.Call


@dataclass(frozen=True)
class WalkRegistration:
    """A hook registered once per visit of a walk: on the visited module, or on each child."""

    walk: Walk
    call: ast.Call  # the registering call (in the walker, a helper or the callback)
    kind: str
    via: ast.Call | None = None  # the walker's call site that hands the callback over, when through one
    callback: ast.AST | None = None  # the callback function


def recursive_walks(model: SemanticModel, core: Core) -> list[Walk]:
    out: list[Walk] = []
    looping = _child_loops(model)
    for func in model.functions:
        if func not in looping:
            continue  # no loop of its own iterates children: walking its body found nothing (1 s of the corpus)
        params = positional_params(func)
        loops = looping[func]
        for node in loops if loops is not None else _own_nodes(func):
            loop_iter, target, path = _loop_parts(node)
            if loop_iter is None:
                continue
            walked = _walked_param(model, loop_iter, func, params)
            if walked is None:
                continue
            param, wanted_path, text = walked
            child = _target_name(target, wanted_path if path is None else path)
            if child is None:
                continue
            recursion = _recursive_call(model, core, func, node, child, params.index(param), param)
            if recursion is not None:
                out.append(Walk(func, param, params.index(param), node, child, text, recursion))
                break
    return out


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _child_loops(model: SemanticModel) -> dict[ast.AST, list[ast.AST] | None]:
    """For each function (``def``) whose own nodes hold a loop over a call
    ``_walked_param`` can accept (``x.children()``, ``x._modules.values()``...):
    those loops (``for`` statements and comprehensions), in the order
    ``_own_nodes`` meets them, found from the model's index of those calls.
    Any other loop of the function is no walk, so ``recursive_walks`` need
    not walk the rest of its body.  None for a function whose loops could not
    be put in that order (its body is walked, as before)."""
    found: dict[ast.AST, list[ast.AST] | None] = {}
    for method in (*_CHILD_ITERATORS, *_MODULES_DICT):
        for call in model.method_calls.get(method, ()):
            parent = getattr(call, "_hl_parent", None)
            if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.iter is call:
                loop: ast.AST = parent
            elif isinstance(parent, _COMPREHENSIONS) and parent.generators[0].iter is call:
                loop = parent.generators[0]  # the first iterable is evaluated outside: its parent is the expression
            else:
                continue
            owner = getattr(loop, "_hl_parent", None)
            while owner is not None and not isinstance(owner, FunctionNode + (ast.Lambda, ast.ClassDef)):
                owner = getattr(owner, "_hl_parent", None)
            if isinstance(owner, FunctionNode):
                loops = found.setdefault(owner, [])
                if loops is not None and loop not in loops:
                    loops.append(loop)
    for func, loops in found.items():
        if loops is None or len(loops) < 2:
            continue
        positions: dict[int, dict[int, int]] = {}
        try:
            loops.sort(key=lambda loop: _preorder_path(loop, func, positions))
        except KeyError:  # a node its parent link does not list among the children: walked as before
            found[func] = None
    return found


def _preorder_path(node: ast.AST, top: ast.AST, positions: dict[int, dict[int, int]]) -> tuple[int, ...]:
    """The child positions leading from ``top`` down to ``node``: sorted, the
    order of a depth-first walk that visits children first to last.
    ``positions``: each parent's children by position, kept across calls."""
    path: list[int] = []
    cur = node
    while cur is not top:
        parent = cur._hl_parent  # type: ignore[attr-defined]
        index = positions.get(id(parent))
        if index is None:
            index = positions[id(parent)] = {id(child): i for i, child in enumerate(child_nodes(parent))}
        path.append(index[id(cur)])
        cur = parent
    return tuple(reversed(path))


def _own_nodes(func: ast.AST):
    body = func.body if isinstance(getattr(func, "body", None), list) else [getattr(func, "body", None)]
    stack = [node for node in reversed(body) if node is not None]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(reversed(child_nodes(node)))


def _loop_parts(node: ast.AST) -> tuple[ast.AST | None, ast.AST | None, tuple[int, ...] | None]:
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        return node.iter, node.target, None
    return None, None, None


def _walked_param(model: SemanticModel, iterable: ast.AST, func: ast.AST,
                  params: list[str]) -> tuple[str, tuple[int, ...], str] | None:
    """``module.children()``, ``module.named_children()``, ``module._modules.values()``
    / ``.items()``, with ``module`` a parameter of ``func``: (parameter, where the
    child sits in each item, the iteration as written)."""
    if not (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) and not iterable.args):
        return None
    method = iterable.func.attr
    base = iterable.func.value
    if method in _CHILD_ITERATORS:
        path = _CHILD_ITERATORS[method]
    elif method in _MODULES_DICT and isinstance(base, ast.Attribute) and base.attr == "_modules":
        path = _MODULES_DICT[method]
        base = base.value
    else:
        return None
    if not isinstance(base, ast.Name) or base.id not in params or not hasattr(base, "_hl_scope"):
        return None
    bindings = model.bindings_at(base)
    if len(bindings) != 1 or bindings[0].kind != "param" or bindings[0].scope.node is not func:
        return None
    return base.id, path, ast.unparse(iterable)


def _target_name(target: ast.AST | None, path: tuple[int, ...]) -> str | None:
    cur = target
    for index in path:
        if not isinstance(cur, ast.Tuple) or index >= len(cur.elts):
            return None
        cur = cur.elts[index]
    return cur.id if isinstance(cur, ast.Name) else None


def _recursive_call(model: SemanticModel, core: Core, func: ast.AST, loop: ast.AST, child: str, index: int,
                    param: str) -> ast.Call | None:
    """A call of ``func`` itself inside ``loop`` that hands it the child in
    the walked parameter's place."""
    scope = loop._hl_parent if isinstance(loop, ast.comprehension) else loop  # type: ignore[attr-defined]
    for node in walk_tree(scope):
        if not isinstance(node, ast.Call):
            continue
        bound = _calls_itself(model, core, node, func)
        if bound is None:
            continue
        position = index - bound
        argument: ast.AST | None = None
        if 0 <= position < len(node.args) and not any(isinstance(a, ast.Starred) for a in node.args[:position + 1]):
            argument = node.args[position]
        for kw in node.keywords:
            if kw.arg == param:
                argument = kw.value
        if isinstance(argument, ast.Name) and argument.id == child:
            return node
    return None


def _calls_itself(model: SemanticModel, core: Core, call: ast.Call, func: ast.AST) -> int | None:
    """How many leading parameters the call supplies itself (0, or 1 for
    ``self.method(...)``), when ``call`` calls ``func``; else None."""
    f = call.func
    name = getattr(func, "name", None)
    if isinstance(f, ast.Name) and f.id == name and hasattr(f, "_hl_scope"):
        bindings = model.bindings_at(f)
        if len(bindings) == 1 and bindings[0].kind == "def" and bindings[0].node is func:
            return 0
        return None
    if isinstance(f, ast.Attribute) and f.attr == name and isinstance(f.value, ast.Name):
        cls = model.enclosing_class(func)
        if cls is not None and cls.method(name) is func and core.places.of(f.value, func) == P.SELF:
            return 1
        # `child.walk()`: a method called on the child (`def walk(self): ... for c in self.children(): c.walk()`)
    return None


# ------------------------------------------------------------------ what a walk registers


def registrations(model: SemanticModel, core: Core, walk: Walk) -> list[WalkRegistration]:
    out: list[WalkRegistration] = []
    func = walk.func
    visited = f"p:{walk.param}"
    for reg in core.facts(func).regs:
        if reg.kind not in MODULE_KINDS or reg.site is None:
            continue
        on_visited = reg.target == visited
        on_child = isinstance(reg.target_expr, ast.Name) and reg.target_expr.id == walk.child \
            and _inside(reg.site, walk.loop)
        if on_visited or on_child:
            call = reg.registration.call if reg.registration is not None else reg.site
            out.append(WalkRegistration(walk, call, reg.kind))
    # callbacks: `fn(module, ...)` with `fn` a parameter of the walker
    for callback_param, position in _callback_calls(model, func, walk):
        index = positional_params(func).index(callback_param) if callback_param in positional_params(func) else -1
        for site in _call_sites(model, core, func):
            handed = _argument_at(site.call, index - site.bound, callback_param)
            target = _local_function(model, handed)
            if target is None:
                continue
            params = positional_params(target)
            if position >= len(params):
                continue
            wanted = f"p:{params[position]}"
            for reg in core.facts(target).regs:
                if reg.kind in MODULE_KINDS and reg.target == wanted and reg.site is not None:
                    call = reg.registration.call if reg.registration is not None else reg.site
                    out.append(WalkRegistration(walk, call, reg.kind, site.call, target))
    return out


@dataclass(frozen=True)
class _Site:
    call: ast.Call
    bound: int


def _call_sites(model: SemanticModel, core: Core, func: ast.AST) -> list[_Site]:
    name = getattr(func, "name", "")
    out = []
    for call in list(model.name_calls.get(name, ())) + list(model.method_calls.get(name, ())):
        owner = core.places.owner(call)
        if owner is func:
            continue  # the recursion itself hands the callback on
        if isinstance(call.func, ast.Name):
            bindings = model.bindings_at(call.func) if hasattr(call.func, "_hl_scope") else []
            if len(bindings) == 1 and bindings[0].node is func:
                out.append(_Site(call, 0))
        else:
            local = core.local_callee(call)
            if local is not None and local[0] is func:
                out.append(_Site(call, local[1]))
    return out


def _callback_calls(model: SemanticModel, func: ast.AST, walk: Walk) -> list[tuple[str, int]]:
    """``fn(module, ...)`` in the walker's own code, ``fn`` one of its
    parameters, ``module`` the visited one (or the child, inside the loop):
    (the callback parameter, the position the module is passed at)."""
    params = set(positional_params(func)) | {a.arg for a in func.args.kwonlyargs}  # type: ignore[attr-defined]
    out = []
    for node in _own_nodes(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in params
                and node.func.id != walk.param):
            continue
        for position, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            if isinstance(arg, ast.Name) and (arg.id == walk.param or arg.id == walk.child and _inside(node, walk.loop)):
                out.append((node.func.id, position))
                break
    return out


def _argument_at(call: ast.Call, position: int, name: str) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if 0 <= position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        return call.args[position]
    return None


def _local_function(model: SemanticModel, expr: ast.AST | None) -> ast.AST | None:
    if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
        bindings = model.bindings_at(expr)
        if len(bindings) == 1 and bindings[0].kind == "def" and isinstance(bindings[0].node, FunctionNode):
            return bindings[0].node
    return None


def _inside(node: ast.AST, ancestor: ast.AST) -> bool:
    scope = ancestor._hl_parent if isinstance(ancestor, ast.comprehension) else ancestor  # type: ignore[attr-defined]
    cur: ast.AST | None = node
    while cur is not None:
        if cur is scope:
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


# ------------------------------------------------------------------ forward patches


@dataclass(frozen=True)
class WalkPatch:
    """The visited module's forward wrapped in place once per visit: its
    class swapped for one built from its current class (``m.__class__ =
    make_patched(m)``), or its ``forward`` replaced by a wrapper of the
    current one (``m.forward = wrap(m.forward)``).  A patch plays a forward
    hook's part; applied twice, the second wraps the first."""

    walk: Walk
    assign: ast.Assign
    what: str  # "__class__" or "forward"


def forward_patches(model: SemanticModel, walk: Walk) -> list[WalkPatch]:
    """The forward patches the walker applies to the module it visits (or to
    each child, inside the loop), built from the module's current class or
    forward, with no test of the module before them that can end the visit
    (``if hasattr(m, "orig_type"): return``: an already patched module is
    told apart, or at least something about the module decides)."""
    func = walk.func
    out: list[WalkPatch] = []
    for node in _own_nodes(func):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if not (isinstance(target, ast.Attribute) and target.attr in ("__class__", "forward")
                and isinstance(target.value, ast.Name)):
            continue
        name = target.value.id
        if not (name == walk.param or name == walk.child and _inside(node, walk.loop)):
            continue
        if not _wraps_current(model, node.value, name, target.attr):
            continue
        if _visit_ended_by_test_of(func, name, node):
            continue
        out.append(WalkPatch(walk, node, target.attr))
    return out


def _wraps_current(model: SemanticModel, value: ast.AST, name: str, attr: str) -> bool:
    """Is the new class / forward built from the module's current one: a
    call handed ``type(m)``, ``m.__class__`` or ``m.forward``, or handed ``m``
    itself by a local function that reads one of those of its parameter?"""
    if not isinstance(value, ast.Call):
        return False
    if _keyword_partial_of_forward(value, name):
        return False
    arguments = list(value.args) + [k.value for k in value.keywords]
    for position, arg in enumerate(arguments):
        if _holds_current(arg, {name}):
            return True
        if isinstance(arg, ast.Name) and arg.id == name and position < len(value.args):
            callee = _local_function(model, value.func)
            params = positional_params(callee) if callee is not None else []
            if position < len(params) and any(_current_of(node, {params[position]}) for node in _own_nodes(callee)):
                return True
    return False


def _keyword_partial_of_forward(call: ast.Call, name: str) -> bool:
    """``partial(m.forward, key=value)``: applying it twice does not stack,
    because ``functools.partial`` of a partial flattens to one partial of the
    original function and the later keywords replace the same-named earlier
    ones (mmrazor's ``child.forward = partial(child.forward, arch_param=p)``).
    Positional arguments would accumulate, so only keyword-only partials."""
    func = call.func
    is_partial = (isinstance(func, ast.Name) and func.id == "partial") or \
        (isinstance(func, ast.Attribute) and func.attr == "partial"
         and isinstance(func.value, ast.Name) and func.value.id == "functools")
    return is_partial and len(call.args) == 1 and bool(call.keywords) \
        and all(k.arg is not None for k in call.keywords) \
        and isinstance(call.args[0], ast.Attribute) and call.args[0].attr == "forward" \
        and isinstance(call.args[0].value, ast.Name) and call.args[0].value.id == name


def _holds_current(arg: ast.AST, names: set[str]) -> bool:
    """``type(m)``, ``m.__class__`` or ``m.forward`` anywhere in an argument
    (``(type(m),)`` as the bases of ``type(...)``), but not an attribute
    read off the class (``type(m).forward`` is the class's own forward:
    binding it again replaces a patch rather than wrapping it)."""
    for node in ast.walk(arg):
        if _current_of(node, names) and not isinstance(getattr(node, "_hl_parent", None), ast.Attribute):
            return True
    return False


def _current_of(expr: ast.AST, names: set[str]) -> bool:
    if isinstance(expr, ast.Attribute) and expr.attr in ("__class__", "forward") \
            and isinstance(expr.value, ast.Name) and expr.value.id in names:
        return True
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "type" \
        and len(expr.args) == 1 and isinstance(expr.args[0], ast.Name) and expr.args[0].id in names


def _visit_ended_by_test_of(func: ast.AST, name: str, before: ast.AST) -> bool:
    """``if <test reading m>: return`` ahead of ``before`` in the walker."""
    for node in _own_nodes(func):
        if not isinstance(node, ast.If) or node.lineno >= before.lineno or _inside(before, node):
            continue
        if not any(isinstance(stmt, ast.Return) for stmt in node.body):
            continue
        if any(isinstance(sub, ast.Name) and sub.id == name for sub in ast.walk(node.test)):
            return True
    return False


# ------------------------------------------------------------------ memos


def remembers_modules(func: ast.AST, module_names: set[str]) -> ast.AST | None:
    """Code in ``func`` that tells a second visit of a module from the first:
    a membership test (``m in seen``, ``id(m) not in done``), a set it is
    added to (``seen.add(m)``), a record keyed by it read in a test (``if
    done.get(id(m)):``), or a look at the hooks the module already holds
    (``len(m._forward_hooks)``).  The node, or None.  A store keyed by the
    module alone (``handles[m] = m.register_forward_hook(...)``) does not
    count: it registers again all the same."""
    def is_module(expr: ast.AST) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in module_names
        return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "id" \
            and len(expr.args) == 1 and is_module(expr.args[0])

    for node in _own_nodes(func):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and is_module(node.left):
            return node
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add" \
                and len(node.args) == 1 and is_module(node.args[0]):
            return node
        if isinstance(node, ast.Attribute) and node.attr in _HOOK_DICTS:
            return node
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            for sub in ast.walk(node.test):
                if isinstance(sub, ast.Subscript) and is_module(sub.slice) \
                        or isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                        and sub.func.attr == "get" and sub.args and is_module(sub.args[0]):
                    return sub
    return None


# --- a submodule registered a second time under another name --------------------------------

# Attribution classes of captum that hook every module of the model they are given through
# `self.model.apply(self._register_hooks)` (captum 0.5 to 0.9: deep_lift.py,
# guided_backprop_deconvnet.py, layer_deep_lift.py).
_APPLY_HOOKING_CLASSES = frozenset({
    "DeepLift", "DeepLiftShap", "LayerDeepLift", "LayerDeepLiftShap", "NeuronDeepLift", "NeuronDeepLiftShap",
    "GuidedBackprop", "Deconvolution", "NeuronGuidedBackprop", "NeuronDeconvolution", "GuidedGradCam",
})
APPLY_WALKER_WORDS = ("DeepLift", "GuidedBackprop", "Deconvolution", "GuidedGradCam", "self.apply(")
_MODULE_PARTS = frozenset({"named_modules", "modules", "children", "named_children", "get_submodule"})
_HOOK_METHODS = frozenset({"register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
                           "register_full_backward_pre_hook", "register_backward_hook"})


@dataclass(frozen=True)
class SubmoduleAlias:
    """``self.<attr> = <a module inside self.<owner>>`` in an ``nn.Module``
    class that is also walked with ``Module.apply`` to register hooks."""

    assign: ast.AST
    attr: str
    owner: str
    walker: ast.Call
    walker_text: str


def _part_owner(place: str) -> str | None:
    """``e:s.model`` and ``s.model.fc`` are parts of ``self.model``."""
    if place.startswith("e:"):
        place = place[2:]
    if not place.startswith("s."):
        return None
    return place[2:].split(".")[0] or None


def _drawn_from_module_tree(model: SemanticModel, info, expr: ast.AST, depth: int = 0) -> bool:
    """The expression (or the method of the class it calls) walks a module tree."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _MODULE_PARTS:
                return True
            if depth < 2 and isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                method = info.method(node.func.attr)
                if method is not None and method is not expr and _drawn_from_module_tree(model, info, method,
                                                                                         depth + 1):
                    return True
    return False


def _registers_module_hooks(func: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _HOOK_METHODS
               for n in ast.walk(func))


def _apply_walkers(model: SemanticModel, inference, info) -> list[tuple[ast.Call, str]]:
    """Calls in the class's methods that walk ``self`` with ``Module.apply`` to register hooks."""
    out: list[tuple[ast.Call, str]] = []
    for func in info.methods.values():
        for node in walk(func):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            first = node.args[0]
            if isinstance(node.func, ast.Attribute) and node.func.attr == "apply" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                fn = inference.callable_of(first)
                if fn is not None and _registers_module_hooks(fn.node):
                    out.append((node, f"self.apply({ast.unparse(first)})"))
            elif isinstance(first, ast.Name) and first.id == "self":
                qual = model.qualify(node.func) or ""
                if qual.startswith("captum.") and qual.rsplit(".", 1)[-1] in _APPLY_HOOKING_CLASSES:
                    out.append((node, f"{ast.unparse(node.func)}(self)"))
    return out


def _may_walk_with_apply(model: SemanticModel, inference) -> bool:
    """Whether the file holds, anywhere, a call ``_apply_walkers`` keeps
    (``self.apply(fn)`` with an ``fn`` that registers module hooks, a captum
    class given ``self``): the model's call indexes answer it, where walking
    every method of every module class found nothing in nearly every file the
    triggers admit (``self.apply(self._init_weights)`` in every transformers
    model)."""
    for call in model.method_calls.get("apply", ()):
        receiver = call.func.value  # type: ignore[attr-defined]
        if call.args and isinstance(receiver, ast.Name) and receiver.id == "self":
            fn = inference.callable_of(call.args[0])
            if fn is not None and _registers_module_hooks(fn.node):
                return True
    try:
        for calls in (model.name_calls, model.method_calls):
            for group in calls.values():
                for call in group:
                    if call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == "self":
                        qual = model.qualify(call.func) or ""
                        if qual.startswith("captum.") and qual.rsplit(".", 1)[-1] in _APPLY_HOOKING_CLASSES:
                            return True
    except RecursionError:
        return True  # the walk decides, as it did
    return False


def aliased_submodules(model: SemanticModel, core: Core, inference) -> list[SubmoduleAlias]:
    """Submodules an ``nn.Module`` class registers a second time under another
    attribute, when the class walks itself with ``Module.apply`` to hook
    modules: ``apply`` recurses over ``children()`` of each module, which
    deduplicates only among one module's direct children, so the module is
    visited (and hooked) once through its real parent and once through the
    alias."""
    out: list[SubmoduleAlias] = []
    if not _may_walk_with_apply(model, inference):
        return out
    for info in model.classes.values():
        if model.is_module_class(info) is not True:
            continue
        walkers = _apply_walkers(model, inference, info)
        if not walkers:
            continue
        for attr, entries in info.attributes.items():
            for expr, scope, node in entries:
                func = scope.node
                owner = _part_owner(core.places.of(expr, func)) if isinstance(func, FunctionNode) else None
                if owner is None or owner == attr:
                    continue
                if not (_drawn_from_module_tree(model, info, expr) or isinstance(inference.infer(expr), ModuleValue)):
                    continue
                call, text = walkers[0]
                out.append(SubmoduleAlias(node, attr, owner, call, text))
    return out
