"""Names for what the findings talk about: hooks, modules, parameters, tensors.

Modules and parameters are named from the variables of the user's frames at
registration time (``net.fc1``, ``layer.bias``); only weak references to those
roots are kept, so naming never keeps a model alive.
"""

from __future__ import annotations

import dis
import functools
import inspect
import types
import weakref
from typing import Any, Callable

import torch
from torch import nn

from hooklint.runtime.frames import is_internal

_MAX_ROOTS = 12
_MAX_FRAMES = 4


def hook_name(fn: Any) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        name = type(fn).__qualname__
    return name.replace(".<locals>", "")


def hook_code(fn: Any) -> types.CodeType | None:
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None and not isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)):
        code = getattr(getattr(type(fn), "__call__", None), "__code__", None)
    return code


def _identity(value: Any) -> Any:
    return id(value)


def hook_key(fn: Any) -> tuple:
    """Two hooks with equal keys do the same thing: same code, same bound object,
    same closure contents and defaults (by identity).  Used to spot the same hook
    registered again and again (HKL304); closures from a factory called with
    different arguments are different hooks."""
    if isinstance(fn, functools.partial):
        return ("partial", hook_key(fn.func), tuple(map(_identity, fn.args)),
                tuple(sorted((k, id(v)) for k, v in fn.keywords.items())))
    if inspect.ismethod(fn):
        return ("method", hook_key(fn.__func__), id(fn.__self__))
    code = getattr(fn, "__code__", None)
    if isinstance(fn, types.FunctionType) and code is not None:
        cells = []
        for cell in fn.__closure__ or ():
            try:
                cells.append(id(cell.cell_contents))
            except ValueError:  # an empty cell
                cells.append(None)
        return ("function", code, tuple(cells), id(fn.__defaults__), id(fn.__kwdefaults__))
    return ("object", id(fn))


def hook_code_key(fn: Any) -> Any:
    """What the hook runs, without what it is bound to or closes over: the code
    object of a function (of a bound method's function, of a partial's
    function), else the callable's class.  A lambda created afresh on every call
    of a function has one code key (HKL304 groups registrations by it)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        return code
    return type(fn)


def _code_and_index(fn: Any, position: int) -> tuple[types.CodeType, int] | None:
    """The code object that receives the hook's ``position``-th argument and
    that argument's index among its parameters, past what ``partial``, a bound
    ``self`` or a ``__call__`` object fill in; None for builtins."""
    bound = 0
    while isinstance(fn, functools.partial):
        bound += len(fn.args)
        fn = fn.func
    if inspect.ismethod(fn):
        fn = fn.__func__
        bound += 1
    elif not isinstance(fn, types.FunctionType):
        call = getattr(type(fn), "__call__", None)
        if not isinstance(call, types.FunctionType):
            return None
        fn, bound = call, bound + 1
    return fn.__code__, position + bound


def argument_name(fn: Any, position: int) -> str | None:
    """The name under which the hook receives its ``position``-th argument
    (0-based, as PyTorch passes them), or None when it cannot be seen."""
    found = _code_and_index(fn, position)
    if found is None:
        return None
    code, index = found
    if index >= code.co_argcount:
        return None
    return code.co_varnames[index]


_GRADIENT_NAMES = {"grad", "grads", "g", "gradient", "gradients", "d_p", "dp", "grad_p", "p_grad"}


def names_a_gradient(name: str | None) -> bool:
    """``grad``, ``g``, ``gradient``, ``weight_grad``, ``grad_w``: the name says the
    author takes the value for a gradient."""
    if not name:
        return False
    name = name.lower().lstrip("_")
    return name in _GRADIENT_NAMES or name.startswith("grad_") or name.endswith(("_grad", "_grads"))


def attribute_names(fn: Any) -> set[str]:
    """Attribute and global names the hook's code (and code nested in it) uses
    (``.grad``, ``.data``), without its local variable names."""
    code = hook_code(fn)
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return names


def reads_parameter(fn: Any, position: int) -> bool | None:
    """Whether the hook's code ever loads its ``position``-th argument (0-based, as
    PyTorch passes them).  None when that cannot be seen (builtins, ``*args``)."""
    found = _code_and_index(fn, position)
    if found is None:
        return None
    code, index = found
    if index >= code.co_argcount + code.co_kwonlyargcount:
        return None if code.co_flags & inspect.CO_VARARGS else False
    name = code.co_varnames[index]
    return _loads_name(code, name)


def _loads_name(code: types.CodeType, name: str) -> bool:
    for ins in dis.get_instructions(code):
        if ins.argval == name and ins.opname.startswith(("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE")):
            return True
    return False


def code_names(fn: Any) -> set[str]:
    """Every attribute, global and local name the hook's code (and code nested in
    it) mentions."""
    code = hook_code(fn)
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        current = stack.pop()
        names.update(current.co_names, current.co_varnames, current.co_freevars)
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return names


def module_label(module: nn.Module) -> str:
    extra = ""
    try:
        extra = module.extra_repr()
    except Exception:  # noqa: BLE001 - a user's extra_repr may fail; the class name is enough
        pass
    if len(extra) > 60:
        extra = extra[:57] + "..."
    return f"{type(module).__name__}({extra})"


def shape_text(tensor: torch.Tensor) -> str:
    return "(" + ", ".join(str(d) for d in tensor.shape) + ("," if tensor.dim() == 1 else "") + ")"


class Roots:
    """Modules and parameters the user's code had in scope when something was
    registered, kept weakly, to name modules and parameters (``net.fc1.weight``)
    later."""

    __slots__ = ("_refs",)

    def __init__(self, refs: list[tuple[str, weakref.ref]]):
        self._refs = refs

    @classmethod
    def capture(cls, frame: types.FrameType | None) -> "Roots":
        refs: list[tuple[str, weakref.ref]] = []
        seen: set[int] = set()
        depth = 0
        while frame is not None and depth < _MAX_FRAMES and len(refs) < _MAX_ROOTS:
            if is_internal(frame.f_code.co_filename):
                frame = frame.f_back
                continue
            scopes = [frame.f_locals]
            if frame.f_globals is not frame.f_locals:
                scopes.append(frame.f_globals)
            for scope in scopes:
                for name, value in list(scope.items()):
                    if isinstance(value, (nn.Module, nn.Parameter)) and id(value) not in seen \
                            and not name.startswith("__"):
                        seen.add(id(value))
                        refs.append((name, weakref.ref(value)))
                        if len(refs) >= _MAX_ROOTS:
                            break
            frame = frame.f_back
            depth += 1
        return cls(refs)

    def module_name(self, module: nn.Module) -> str | None:
        best: str | None = None
        for name, ref in self._refs:
            root = ref()
            if not isinstance(root, nn.Module):
                continue
            if root is module:
                candidate = name
            else:
                candidate = None
                for sub_name, sub in _named_modules(root):
                    if sub is module and sub_name:
                        candidate = f"{name}.{sub_name}"
                        break
            if candidate is not None and (best is None or _better(candidate, best)):
                best = candidate
        return best

    def parameter_name(self, param: torch.Tensor) -> str | None:
        best: str | None = None
        for name, ref in self._refs:
            root = ref()
            if root is param:
                candidate = name
                if best is None or _better(candidate, best):
                    best = candidate
                continue
            if not isinstance(root, nn.Module):
                continue
            for sub_name, p in _named_parameters(root):
                if p is param:
                    candidate = f"{name}.{sub_name}"
                    if best is None or _better(candidate, best):
                        best = candidate
                    break
        return best


def variable_name(frame: types.FrameType | None, value: Any) -> str | None:
    """A name the user's frame gives ``value`` (locals first, then globals)."""
    if frame is None:
        return None
    for scope in (frame.f_locals, frame.f_globals):
        for name, candidate in list(scope.items()):
            if candidate is value and not name.startswith("__"):
                return name
    return None


def _better(candidate: str, current: str) -> bool:
    """A name through a container (``net.fc1``) says more than a loop variable
    (``module``); among those, the shorter path wins."""
    return (candidate.count(".") > 0, -len(candidate)) > (current.count(".") > 0, -len(current))


def _named_modules(root: nn.Module):
    try:
        return list(root.named_modules())
    except Exception:  # noqa: BLE001 - a broken user module must not break reporting
        return []


def _named_parameters(root: nn.Module):
    try:
        return list(root.named_parameters(remove_duplicate=False))
    except Exception:  # noqa: BLE001
        return []


def describe_module(module: nn.Module, roots: Roots | None) -> str:
    name = roots.module_name(module) if roots is not None else None
    if name:
        return f"`{name}` ({type(module).__name__})"
    return f"a `{module_label(module)}` module"


def describe_parameter(param: torch.Tensor, module: nn.Module | None, roots: Roots | None,
                       module_text: str | None = None) -> str:
    """``net.fc1.weight``; ``weight of a `Linear(...)` module`` when the module has no name."""
    if module is not None:
        for sub_name, p in _named_parameters(module):
            if p is param:
                module_name = roots.module_name(module) if roots is not None else None
                if module_name:
                    return f"`{module_name}.{sub_name}`"
                return f"`{sub_name}` of {module_text or describe_module(module, roots)}"
    if roots is not None:
        name = roots.parameter_name(param)
        if name:
            return f"`{name}`"
    return f"a parameter of shape {shape_text(param)}"


def kind_phrase(kind_value: str) -> str:
    return {
        "forward": "forward hook",
        "forward-pre": "forward pre-hook",
        "backward-legacy": "legacy backward hook",
        "full-backward": "full backward hook",
        "full-backward-pre": "full backward pre-hook",
        "tensor": "tensor hook",
        "post-accumulate-grad": "post-accumulate-grad hook",
    }[kind_value]


def callable_site_text(fn: Callable) -> str:
    code = hook_code(fn)
    if code is None:
        return ""
    from hooklint.runtime.frames import display_path

    return f"{display_path(code.co_filename)}:{code.co_firstlineno}"
