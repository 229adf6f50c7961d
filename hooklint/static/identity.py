"""Module identity: what ``isinstance`` and ``type`` checks prove about a name.

Library code rarely constructs the modules it hooks; it walks the caller's
model and picks layers by type::

    for m in model.modules():
        if isinstance(m, nn.ReLU):
            m.register_backward_hook(guided_relu_hook)

The loop alone says "some module"; the test says "an ``nn.ReLU``".  This
module finds the tests that hold at a given point of the code (``if`` bodies,
``else`` branches of negated tests, ``if not ...: continue`` guards before the
point, ``and`` chains, conditional expressions and comprehension filters) and
turns the ones about a name into the classes that name can be.

Recognised tests: ``isinstance(m, C)``, ``isinstance(m, (C1, C2))`` (also
through a name bound to such a tuple), ``type(m) is C``, ``type(m) == C``,
``type(m) in (C1, C2)``, ``m.__class__ is C``, and the class-name forms
``type(m).__name__ == "ReLU"``, ``m.__class__.__name__ in ("ReLU", "ELU")``
(also through ``classname = m.__class__.__name__``).  A class-name test is
weaker evidence (a local class can have the same name), and rules treat it so.
Substring tests (``"Conv" in classname``) prove nothing about the forward and
are not used.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from hooklint.static.semantic import (
    FunctionNode,
    SemanticModel,
    earlier_exit_guards,
    is_torch_module_class,
    short_source,
)

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.semantic import ClassInfo
    from hooklint.static.values import Inference


@dataclass(frozen=True, eq=False)
class Narrowing:
    """What a test proves: the value is an instance of one of ``classes``.

    ``classes`` are qualified torch classes (``torch.nn.ReLU``); ``local``
    are classes of this file.  ``by_name`` is set when the proof is a
    class-name string: a class of another package with that name would pass
    it too.  ``exact`` is set for ``type(m) is C`` (no subclasses).
    """

    classes: tuple[str, ...]
    local: tuple[ClassInfo, ...]
    test: ast.expr
    by_name: bool = False
    exact: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.rsplit(".", 1)[-1] for c in self.classes) + tuple(c.name for c in self.local)

    def describe(self) -> str:
        names = self.names
        text = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        return f"{text} (narrowed by `{short_source(self.test)}` at line {self.test.lineno})"


_BOUNDARIES = FunctionNode + (ast.Lambda, ast.ClassDef, ast.Module)


def holding_tests(node: ast.AST) -> Iterator[ast.expr]:
    """Tests known to be true when ``node`` runs, innermost first, within its
    own function.  Negated tests come back as ``not <test>``."""
    child = node
    parent = getattr(node, "_hl_parent", None)
    while parent is not None and not isinstance(child, _BOUNDARIES):
        if isinstance(parent, (ast.If, ast.While)) and child is not parent.test:
            if _in(child, parent.body):
                yield parent.test
            elif isinstance(parent, ast.If) and _in(child, parent.orelse):
                yield _negate(parent.test)
        elif isinstance(parent, ast.IfExp):
            if child is parent.body:
                yield parent.test
            elif child is parent.orelse:
                yield _negate(parent.test)
        elif isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            for value in parent.values:
                if value is child:
                    break
                yield value
        elif isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)) and any(
                child is getattr(parent, part, None) for part in ("elt", "key", "value")):
            for gen in parent.generators:
                yield from gen.ifs
        if isinstance(child, ast.stmt):
            for earlier in earlier_exit_guards(child, parent):
                if not earlier.orelse:
                    yield _negate(earlier.test)
        child, parent = parent, getattr(parent, "_hl_parent", None)


def _in(node: ast.AST, block: list) -> bool:
    return any(stmt is node for stmt in block)


def _negate(test: ast.expr) -> ast.expr:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    node = ast.UnaryOp(ast.Not(), test)
    ast.copy_location(node, test)
    node._hl_parent = getattr(test, "_hl_parent", None)  # type: ignore[attr-defined]
    return node


class IdentityFacts:
    """Answers "which classes can this name be here" for one file."""

    def __init__(self, model: SemanticModel, inference: Inference):
        self.model = model
        self.inference = inference
        # Walking up from a use is cheap (its depth), so it is always done.
        self.enabled = True

    def narrowing(self, name: ast.Name) -> Narrowing | None:
        """Classes the value of ``name`` is proven to be at this use."""
        if not self.enabled:
            return None
        bindings = self.model.bindings_at(name)
        return self.narrowing_of(name, name.id, bindings)

    def narrowing_of(self, node: ast.AST, name: str, bindings: list | None = None) -> Narrowing | None:
        """Classes ``name`` is proven to be where ``node`` runs (``bindings``:
        the bindings ``name`` has at ``node``, to check the test is about the same variable)."""
        if not self.enabled:
            return None
        for test in holding_tests(node):
            found = self._from_test(test, name, bindings, positive=True)
            if found is not None:
                return found
        return None

    # -- tests ---------------------------------------------------------------
    def _from_test(self, test: ast.expr, name: str, bindings: list | None, positive: bool) -> Narrowing | None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._from_test(test.operand, name, bindings, not positive)
        if isinstance(test, ast.BoolOp):
            if isinstance(test.op, ast.And) and positive:
                for value in test.values:
                    found = self._from_test(value, name, bindings, True)
                    if found is not None:
                        return found
                return None
            if isinstance(test.op, ast.Or) and positive:
                parts = [self._from_test(v, name, bindings, True) for v in test.values]
                if parts and all(p is not None for p in parts):
                    return _union(parts, test)  # type: ignore[arg-type]
                return None
            if isinstance(test.op, ast.Or) and not positive:
                # not (a or b) == not a and not b: negative facts say nothing positive
                return None
            return None
        if not positive:
            return None
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" \
                and len(test.args) == 2 and self._is_name(test.args[0], name, bindings):
            return self._classes(test.args[1], test)
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, op, right = test.left, test.ops[0], test.comparators[0]
            for subject, other in ((left, right), (right, left)):
                if isinstance(op, (ast.Is, ast.Eq)) and self._type_of(subject, name, bindings):
                    found = self._classes(other, test)
                    return found and Narrowing(found.classes, found.local, test, exact=True)
                if isinstance(op, ast.In) and subject is left and self._type_of(subject, name, bindings):
                    found = self._classes(other, test)
                    return found and Narrowing(found.classes, found.local, test, exact=True)
                if (isinstance(op, ast.Eq) or (isinstance(op, ast.In) and subject is left)) \
                        and self._class_name_of(subject, name, bindings):
                    return self._named(other, test)
        return None

    def _is_name(self, expr: ast.AST, name: str, bindings: list | None) -> bool:
        if not (isinstance(expr, ast.Name) and expr.id == name):
            return False
        if bindings is None or not hasattr(expr, "_hl_scope"):
            return True
        return _same_bindings(self.model.bindings_at(expr), bindings)

    def _type_of(self, expr: ast.AST, name: str, bindings: list | None) -> bool:
        """``type(name)`` or ``name.__class__``."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "type" \
                and len(expr.args) == 1:
            return self._is_name(expr.args[0], name, bindings)
        return isinstance(expr, ast.Attribute) and expr.attr == "__class__" \
            and self._is_name(expr.value, name, bindings)

    def _class_name_of(self, expr: ast.AST, name: str, bindings: list | None, depth: int = 0) -> bool:
        """``type(name).__name__``, ``name.__class__.__name__``, or a variable holding it."""
        if isinstance(expr, ast.Attribute) and expr.attr in ("__name__", "__qualname__"):
            return self._type_of(expr.value, name, bindings)
        if isinstance(expr, ast.Name) and depth < 3 and hasattr(expr, "_hl_scope"):
            found = self.model.bindings_at(expr)
            return len(found) == 1 and found[0].kind == "assign" and not found[0].path \
                and isinstance(found[0].value, ast.expr) \
                and self._class_name_of(found[0].value, name, bindings, depth + 1)
        return False

    def _classes(self, expr: ast.AST, test: ast.expr, depth: int = 0) -> Narrowing | None:
        """The classes an ``isinstance`` second argument names, all of them known."""
        items: list[ast.AST]
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            items = list(expr.elts)
        elif isinstance(expr, ast.Name) and depth < 3:
            found = self.model.bindings_at(expr) if hasattr(expr, "_hl_scope") else []
            if len(found) == 1 and found[0].kind == "assign" and not found[0].path \
                    and isinstance(found[0].value, (ast.Tuple, ast.List, ast.Set)):
                return self._classes(found[0].value, test, depth + 1)
            items = [expr]
        else:
            items = [expr]
        classes: list[str] = []
        local: list[ClassInfo] = []
        from hooklint.static.values import ClassValue

        for item in items:
            value = self.inference.infer(item)
            if not isinstance(value, ClassValue):
                return None
            if value.torch_class is not None:
                if value.torch_class in ("torch.nn.Module", "torch.nn.modules.module.Module"):
                    return None  # "some module": no narrower than before
                classes.append(_canonical(value.torch_class))
            elif value.local_class is not None and self.model.is_module_class(value.local_class):
                local.append(value.local_class)
            else:
                return None
        if not classes and not local:
            return None
        return Narrowing(tuple(classes), tuple(local), test)

    def _named(self, expr: ast.AST, test: ast.expr) -> Narrowing | None:
        """``"ReLU"`` or ``("ReLU", "ELU")`` compared with a class name."""
        items = list(expr.elts) if isinstance(expr, (ast.Tuple, ast.List, ast.Set)) else [expr]
        names = []
        for item in items:
            if not (isinstance(item, ast.Constant) and isinstance(item.value, str) and item.value.isidentifier()):
                return None
            names.append(item.value)
        classes = tuple(f"torch.nn.{n}" for n in names)
        if not all(is_torch_module_class(c) for c in classes):
            return None
        local = tuple(info for info in self.model.classes.values() if info.name in names)
        return Narrowing(classes, local, test, by_name=True, exact=True)


def _union(parts: list[Narrowing], test: ast.expr) -> Narrowing:
    classes: list[str] = []
    local: list = []
    for part in parts:
        classes += [c for c in part.classes if c not in classes]
        local += [c for c in part.local if c not in local]
    return Narrowing(tuple(classes), tuple(local), test, by_name=any(p.by_name for p in parts),
                     exact=all(p.exact for p in parts))


def _canonical(qualname: str) -> str:
    """``torch.nn.modules.activation.ReLU`` -> ``torch.nn.ReLU``."""
    return "torch.nn." + qualname.rsplit(".", 1)[-1] if qualname.startswith("torch.nn.") else qualname


def _same_bindings(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))

