"""From raw run-time facts to observations, one function per pattern.

Every message names the hook, what it is registered on, what happened and why
that is wrong; ``expected``/``observed`` are what the assertion helpers print.
"""

from __future__ import annotations

import inspect
import re
import weakref
from typing import TYPE_CHECKING, Any, Iterator

import torch
from torch import nn

from hooklint.runtime import describe, frames
from hooklint.runtime.frames import Site
from hooklint.runtime.observation import Observation
from hooklint.static.hooks import HookKind

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.runtime.core import BackwardInfo, GradAccess, HookRecord, LegacyBinding, ParamState, Runtime

_PARAM_HOOK_HELP = (
    "Edit the gradient from a hook on the parameter itself: `param.register_hook(lambda g: ...)` runs before "
    "accumulation and may return a new gradient; `param.register_post_accumulate_grad_hook(fn)` runs once "
    "`param.grad` holds this backward's gradient."
)


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") and word[-2:-1] not in "aeiou" else f"{n} {word}s"


def _shapes(values: list) -> str:
    return "[" + ", ".join("None" if v is None else "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"
                           for v in values) + "]"


# -- HKL304 --------------------------------------------------------------------


def repeated_registration(group: list["HookRecord"], across_runs: bool = False) -> Observation:
    """HKL304: ``group`` are live registrations on one target, either of the
    same hook (same code and closure contents, from any line), or, with
    ``across_runs``, of the same code from one line, registered again after the
    target ran while the earlier ones were still in place."""
    newest = group[-1]
    n = len(group)
    when = "forward" if newest.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
    sites = {(r.site.filename, r.site.line) for r in group}
    origin = " from the same line (a loop, or a function called repeatedly)" if len(sites) == 1 else ""
    distinct = len({r.key for r in group}) > 1
    again = ""
    if across_runs:
        ran = "had run" if newest.kind.is_module_backward or newest.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) \
            else "had received a gradient"
        origin = " from the same line"
        again = (f": it was registered again after the {newest.subject_noun} {ran}, with the earlier "
                 f"registrations still in place")
    kind_of_copies = (" (each registration made a new closure or bound object: distinct hooks doing the same "
                      "thing)") if distinct else ""
    related = []
    # registered in a library, repeated by a call in the user's script: say where that call is
    callers = {(r.caller_site.filename, r.caller_site.line) if r.caller_site else None for r in group}
    if len(sites) == 1 and len(callers) == 1 and newest.caller_site is not None:
        origin += f", each time through the call at {newest.caller_site},"
        related.append(newest.caller_site.related("the call that repeats the registration"))
    listed = {(newest.site.filename, newest.site.line)}
    for rec in group[:-1]:
        where = (rec.site.filename, rec.site.line)
        if where not in listed:
            listed.add(where)
            related.append(rec.site.related("also registered here"))
    return Observation(
        code="HKL304",
        key=("HKL304", newest.site, newest.kind.value, newest.name),
        site=newest.site,
        message=f"{newest.what()} is registered {n} times on {newest.target_text()}{origin} and never removed"
        f"{again}{kind_of_copies}; it now runs {n} times in every {when}",
        help="Register the hook once (outside the loop or the repeated call), or keep its handle and call "
        "`handle.remove()` before registering it again (a `try`/`finally` around the forward and backward).",
        expected="one live registration of the hook on its target",
        observed=f"{n} live registrations of the same hook{' code' if distinct else ''} on the same target",
        related=tuple(related),
        count=n,
        counts_itself=True,
        subject=newest.target_text(),
        subject_noun=newest.subject_noun,
    )


# -- HKL401 --------------------------------------------------------------------


def mutated_argument(rec: "HookRecord", changed: list[tuple[str, int, int]]) -> Observation:
    label, before, after = changed[0]
    more = f" (and {_plural(len(changed) - 1, 'other gradient')})" if len(changed) > 1 else ""
    target = rec.target_text()
    return Observation(
        code="HKL401",
        key=("HKL401", rec.site, rec.name, "in place"),
        site=rec.site,
        message=f"{rec.what()} on {target} modified its gradient argument `{label}` in place{more} "
        f"(its version counter went from {before} to {after})",
        help="Return a new tensor instead (`return grad * 2`): autograd can hand the same gradient buffer to "
        "other edges of the graph, so an in-place edit may change other tensors' gradients too.",
        expected="the hook leaves its gradient argument unchanged and returns a new tensor",
        observed=f"`{label}` was modified in place",
        subject=target,
        subject_noun=rec.subject_noun,
    )


_EXPANDED_WRITE = "more than one element of the written-to tensor refers to a single memory location"


def failed_inplace_edit(rec: "HookRecord", exc: BaseException) -> Observation | None:
    text = str(exc)
    if not isinstance(exc, RuntimeError) or _EXPANDED_WRITE not in text:
        return None
    first_line = text.splitlines()[0] if text else type(exc).__name__
    target = rec.target_text()
    return Observation(
        code="HKL401",
        key=("HKL401", rec.site, rec.name, "refused"),
        site=rec.site,
        message=f"{rec.what()} on {target} tried to modify its gradient argument in place and PyTorch "
        f"refused (`RuntimeError: {first_line}`): the gradient it received is an expanded view",
        help="Return a new tensor instead (`return grad * 2`); a hook must not modify its argument.",
        expected="the hook returns a new gradient",
        observed="an in-place write into an expanded gradient raised RuntimeError",
        subject=target,
        subject_noun=rec.subject_noun,
    )


# -- HKL102, HKL101 --------------------------------------------------------------


def legacy_grad_input(rec: "HookRecord", module: nn.Module, node: Any, grad_input: Any,
                      binding: "LegacyBinding") -> Observation:
    """HKL102 from the autograd graph: the node the legacy hook is bound to does not
    take the module's inputs as its inputs, so `grad_input` is not their
    gradient, whatever its shapes."""
    got = [None if g is None else tuple(g.shape) for g in grad_input] if isinstance(grad_input, tuple) else []
    expected = [item.shape if item is not None else None for item in binding.inputs]
    node_name = node.name()
    module_text = describe.describe_module(module, rec.roots)
    chain = _ops_from_inputs(node, binding)
    where = ", the last autograd op of the module's forward"
    if len(chain) > 1:
        where += f" (from the module's input: {_chain_text(chain)})"
    if any(item is not None and item.node is node for item in binding.inputs):
        where = (", the op that produced the module's input: the forward returned its input unchanged, so it "
                 "ran no op of its own to bind to")
    i = binding.wrong[0]
    entry = _grad_input_entry(node, i, module, rec)
    item = binding.inputs[i]
    if item is not None and not item.needs_grad:
        wanted = f"the module's input {i} needs no gradient (its entry would be None)"
    else:
        wanted = f"not the gradient of the module's input {i}" if len(expected) > 1 else \
            "not the gradient of the module's input"
    shapes = ""
    if i < len(got) and item is not None and got[i] == item.shape:
        shapes = f" (the shapes are the same, {_shapes([item.shape])[1:-1]}: only the values differ)"
    elif got:
        shapes = f" (`grad_input` shapes {_shapes(got)}, module input shapes {_shapes(expected)})"
    more = ""
    if len(binding.wrong) > 1:
        more = f"; {_plural(len(binding.wrong) - 1, 'other entry')} of `grad_input` too"
    return Observation(
        code="HKL102",
        key=("HKL102", rec.site, rec.name),
        site=rec.site,
        message=f"{rec.what()} on {module_text} uses `grad_input`, but it is bound to `{node_name}`{where}: "
        f"{entry}, {wanted}{shapes}{more}",
        help="Register it with `register_full_backward_hook`, whose `grad_input` has one entry per module input; "
        "or hook the tensor you mean with `tensor.register_hook`.",
        expected=f"grad_input[{i}] is the gradient of the module's input {i}",
        observed=f"{entry} (`{node_name}` is bound; its inputs are not the module's inputs)",
        subject=module_text,
        subject_noun="module",
    )


_MAX_WALK = 512  # autograd nodes visited to name the ops between a module's input and its output


def _ops_from_inputs(node: Any, binding: "LegacyBinding") -> list[str]:
    """The names of the autograd ops from the module's inputs to ``node``, in
    forward order, along the shortest path; [] when no input is reached (it
    needs no gradient, or the module is too large to walk)."""
    inputs = [item for item in binding.inputs if item is not None and item.needs_grad]
    if not inputs:
        return []
    parents: dict[int, Any] = {id(node): None}
    nodes = {id(node): node}
    queue = [node]
    head = 0
    while head < len(queue) and len(nodes) < _MAX_WALK:
        current = queue[head]
        head += 1
        for child, nr in current.next_functions:
            if child is None:
                continue
            if any(item.is_edge(child, nr) for item in inputs):
                path = [current.name()]
                back = parents[id(current)]
                while back is not None:
                    path.append(back.name())
                    back = parents[id(back)]
                return path
            if id(child) not in nodes:
                nodes[id(child)] = child
                parents[id(child)] = current
                queue.append(child)
    return []


def _chain_text(chain: list[str]) -> str:
    names = [f"`{name}`" for name in chain]
    if len(names) > 6:
        names = names[:2] + [f"{len(names) - 4} more"] + names[-2:]
    return " -> ".join(names)


def _grad_input_entry(node: Any, i: int, module: nn.Module, rec: "HookRecord") -> str:
    edges = node.next_functions
    if i >= len(edges):
        return f"`grad_input` has {_plural(len(edges), 'entry')}, none for the module's input {i}"
    child = edges[i][0]
    if child is None:
        return f"`grad_input[{i}]` is None"
    variable = getattr(child, "variable", None)
    if isinstance(variable, torch.Tensor):
        return f"`grad_input[{i}]` is the gradient of {describe.describe_parameter(variable, module, rec.roots)}"
    return f"`grad_input[{i}]` is the gradient of the output of `{child.name()}`"


def legacy_warning(rec: "HookRecord", module: nn.Module, grad_fn: Any, message: str) -> Observation:
    torch_text = message.split(" Please use")[0].strip()
    bound = f", bound to `{grad_fn.name()}`," if grad_fn is not None else ""
    module_text = describe.describe_module(module, rec.roots)
    return Observation(
        code="HKL101",
        key=("HKL101", rec.site, rec.name),
        site=rec.site,
        message=f"{rec.what()} on {module_text} is a legacy backward hook{bound} "
        f"and PyTorch warned at run time: \"{torch_text}\"",
        help="Use `register_full_backward_hook` (same signature): its grad_input and grad_output are the "
        "gradients of the module's real inputs and outputs.",
        expected="a full backward hook, which sees the module's real inputs",
        observed="a legacy backward hook on a module whose forward runs several autograd ops",
        subject=module_text,
        subject_noun="module",
    )


# -- HKL402 --------------------------------------------------------------------


def return_arity(rec: "HookRecord", module: nn.Module, grads: tuple, result: Any) -> Observation | None:
    """HKL402 for a module backward hook's return value, which PyTorch uses as a
    replacement: a full hook's as `grad_input`, a pre-hook's as `grad_output`, a
    legacy hook's as the gradients of the inputs of the node it is bound to."""
    expected_group = grads[0]
    legacy = rec.kind is HookKind.BACKWARD_LEGACY
    what = "grad_input" if rec.kind in (HookKind.FULL_BACKWARD, HookKind.BACKWARD_LEGACY) else "grad_output"
    if not isinstance(expected_group, tuple):
        return None
    n = len(expected_group)
    raises = ""
    if isinstance(result, torch.Tensor):
        observed = "a Tensor"
    elif isinstance(result, (tuple, list)) and len(result) != n:
        observed = f"{_plural(len(result), 'value')}"
        raises = "incorrect number of values" if legacy else "invalid number of grad_"
    elif legacy and isinstance(result, list):
        observed = "a list"  # the node's hook machinery takes a tuple only
    elif not isinstance(result, (tuple, list)):
        observed = f"a `{type(result).__name__}`"
    else:
        return None
    if legacy:
        shape = f"a tuple of {_plural(n, 'entry')}, one per input of the autograd node it is bound to"
    else:
        per = f"one per module {'input' if what == 'grad_input' else 'output'}"
        shape = f"a tuple of {_plural(n, 'entry')} ({per})"
    module_text = describe.describe_module(module, rec.roots)
    return Observation(
        code="HKL402",
        key=("HKL402", rec.site, rec.name),
        site=rec.site,
        message=f"{rec.what()} on {module_text} returned {observed}, but a replacement `{what}` must be {shape}",
        help=f"Return None, or a tuple as long as `{what}` with None where a gradient is unchanged.",
        expected=f"None or a tuple of {n}",
        observed=observed,
        subject=module_text,
        subject_noun="module",
        raises=raises,
    )


def tensor_hook_return(rec: "HookRecord", result: Any) -> Observation:
    target = rec.target_text()
    return Observation(
        code="HKL402",
        key=("HKL402", rec.site, rec.name),
        site=rec.site,
        message=f"{rec.what()} on {target} returned a `{type(result).__name__}`; a tensor hook returns None or "
        f"one Tensor, the replacement gradient (PyTorch raises `TypeError: expected Variable, but hook returned "
        f"'{type(result).__name__}'`)",
        help="Return the new gradient as one tensor (`return grad * 2`), or None to keep it.",
        expected="None or a Tensor",
        observed=f"a {type(result).__name__}",
        subject=target,
        subject_noun=rec.subject_noun,
        raises="but hook returned",
    )


def _tensor_text(t: torch.Tensor) -> str:
    """``float32 (3, 4)``, with the device when it is not the CPU."""
    device = "" if t.device.type == "cpu" else f" on {t.device}"
    return f"{str(t.dtype).replace('torch.', '')} {describe.shape_text(t)}{device}"


def gradient_mismatch(original: Any, replacement: Any) -> tuple[str, str] | None:
    """Why PyTorch refuses ``replacement`` in place of the gradient ``original``
    (``check_variable_result``: the same dtype, device and layout, the same
    size), as (what differs, the words of PyTorch's error); None when it takes it."""
    if not isinstance(original, torch.Tensor) or not isinstance(replacement, torch.Tensor):
        return None
    if original.dtype != replacement.dtype or original.layout != replacement.layout \
            or original.device.type != replacement.device.type:
        return "type", "has changed the type of value"
    if original.shape != replacement.shape:
        return "shape", "has changed the size of value"
    return None


def _mismatch_observation(rec: "HookRecord", target: str, what: str, original: torch.Tensor,
                          replacement: torch.Tensor, differs: str, torch_words: str) -> Observation:
    noun = "shape" if differs == "shape" else "dtype and device"
    # torch names the callable it ran: the user's tensor hook, but its own wrapper of a module hook
    named = f"hook '{rec.name.rsplit('.', 1)[-1]}'" if rec.kind is HookKind.TENSOR else "hook 'hook'"
    if rec.kind is HookKind.TENSOR:
        fix = "Return a gradient like the one the hook received (`return grad * mask`, with `mask` broadcasting " \
              "to `grad`), or None to keep it"
    else:
        fix = "Return a tuple whose entries are like the gradients the hook received (same shape, dtype and " \
              "device, None where unchanged), or None to keep them"
    return Observation(
        code="HKL402",
        key=("HKL402", rec.site, rec.name, "mismatch"),
        site=rec.site,
        message=f"{rec.what()} on {target} returned {what} of {_tensor_text(replacement)} in place of one of "
        f"{_tensor_text(original)}: a replacement gradient must have the {noun} of the one it replaces; "
        f"PyTorch raises `RuntimeError: {named} {torch_words}` when the backward reaches the hook",
        help=f"{fix}; reduce or reshape a copy for your own use instead of returning it.",
        expected=f"None or {_tensor_text(original)}",
        observed=_tensor_text(replacement),
        subject=target,
        subject_noun=rec.subject_noun,
        raises=torch_words,
    )


def tensor_hook_mismatch(rec: "HookRecord", grad: Any, result: Any) -> Observation | None:
    """HKL402 for a tensor hook that returns a gradient of another shape, dtype or
    device than the one it received."""
    found = gradient_mismatch(grad, result)
    if found is None:
        return None
    return _mismatch_observation(rec, rec.target_text(), "a gradient", grad, result, *found)


def module_hook_mismatch(rec: "HookRecord", module: nn.Module, grads: tuple, result: Any) -> Observation | None:
    """HKL402 for a module backward hook whose replacement ``grad_input`` (or, for a
    pre-hook, ``grad_output``) has the right length but an entry of another
    shape, dtype or device."""
    originals = grads[0]
    if not isinstance(originals, tuple) or not isinstance(result, (tuple, list)) or len(result) != len(originals):
        return None
    what = "grad_input" if rec.kind in (HookKind.FULL_BACKWARD, HookKind.BACKWARD_LEGACY) else "grad_output"
    for i, (original, replacement) in enumerate(zip(originals, result)):
        found = gradient_mismatch(original, replacement)
        if found is not None:
            return _mismatch_observation(rec, describe.describe_module(module, rec.roots), f"`{what}[{i}]`",
                                         original, replacement, *found)
    return None


# -- HKL205 --------------------------------------------------------------------


def optimizer_step_applies_again(rec: "HookRecord", optimizer: Any, params: list) -> Observation:
    """An optimizer step made from a backward hook while the parameters' `.grad`
    still holds a gradient an earlier step from a hook already applied."""
    names = [rec.roots.parameter_name(p) or f"a parameter of shape {describe.shape_text(p)}" for p in params]
    subject = f"`{names[0]}`" + (f" and {_plural(len(names) - 1, 'other')}" if len(names) > 1 else "")
    step = f"`{type(optimizer).__name__}.step()`"
    return Observation(
        code="HKL205",
        key=("HKL205", rec.site, rec.name),
        site=rec.site,
        message=f"{rec.what()} calls {step} for {subject} while its `.grad` still holds the gradient an earlier "
        f"step from this hook already applied (nothing reset it since: one more backward was added to it), so "
        f"this update applies that gradient again; a hook steps on every backward, also on each micro-batch "
        f"of an accumulated step",
        help="Step in the hook only after the last micro-batch's backward (test a flag the loop sets), or reset "
        "the gradient right after the step in the hook (`optimizer.zero_grad()`) and do not accumulate, or "
        "step outside the hook.",
        expected="each backward's gradient used by one optimizer step",
        observed="a gradient used by two steps",
        subject=subject,
        subject_noun="parameter",
    )


# -- HKL407 --------------------------------------------------------------------


def replaced_output(rec: "HookRecord", hook: Any, module: Any, output: Any, result: Any) -> Observation | None:
    """HKL407: a forward hook returned a value that replaced a tensor output
    and cannot be meant as one: not a tensor, or one element where the output
    had several (a count).  Reported where the hook is defined, which may be
    another file than its registration (a table of counters)."""
    if not isinstance(output, torch.Tensor):
        return None
    if isinstance(result, torch.Tensor):
        if result.numel() != 1 or output.numel() == 1:
            return None
        what = f"a one-element tensor ({result.dtype}) where the output was {tuple(output.shape)}"
    else:
        what = f"a `{type(result).__name__}` where the output was a tensor of shape {tuple(output.shape)}"
    target = rec.target_text()
    code = describe.hook_code(hook)
    site = frames.code_site(code) if code is not None else rec.site
    return Observation(
        code="HKL407",
        key=("HKL407", site, rec.name),
        site=site,
        message=f"{rec.what()} on {target} returned {what}: PyTorch takes any value a forward hook returns other "
        f"than None as the module's new output, so the rest of the forward ran on it",
        help="Return nothing from a hook that only records (`return`), and keep counts elsewhere "
             "(`module.total_ops += ...`).",
        expected="None, or a replacement of the output's shape",
        observed=what,
        subject=target,
        subject_noun=rec.subject_noun,
    )


# -- HKL201 --------------------------------------------------------------------


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as integers of the same width: comparisons then see
    every bit (NaNs compare equal to themselves, -0.0 differs from 0.0)."""
    if t.is_floating_point() or t.is_complex():
        width = t.element_size()
        as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(width)
        if as_int is not None and not t.is_complex():
            return t.view(as_int)
    return t


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(_bits(a), _bits(b)))


class GradEditCandidate:
    """A module backward hook read or wrote a parameter's `.grad` before that
    parameter's gradient arrived in this backward.  Whether it arrives later in
    the same backward decides the finding."""

    def __init__(self, rec: "HookRecord", module: nn.Module, param: torch.Tensor, access: "GradAccess",
                 state: "ParamState", grad_now: torch.Tensor | None, on_outputs: bool):
        self.rec = rec
        self.module_ref = weakref.ref(module)
        self.param_ref = access.param_ref
        self.access = access
        self.state = state
        self.on_outputs = on_outputs
        before = access.before
        if access.assigned:
            self.wrote = True
        elif before is None:
            self.wrote = grad_now is not None
        else:
            self.wrote = grad_now is None or not same_values(grad_now, before)
        self.written = grad_now.detach().clone() if self.wrote and grad_now is not None else None
        self.changed: torch.Tensor | None = None
        if self.written is not None and before is not None and before.shape == self.written.shape \
                and before.dtype == self.written.dtype:
            self.changed = _bits(self.written) != _bits(before)
        access.before = None  # the copy is not needed any more
        self.param_text = self._names(param, module)

    def _names(self, param: torch.Tensor, module: nn.Module) -> str:
        module_text = describe.describe_module(module, self.rec.roots)
        self.module_text = module_text
        return describe.describe_parameter(param, module, self.rec.roots, module_text)

    def _head(self) -> str:
        return (f"{self.rec.what()} on {self.module_text} ran before the gradient of {self.param_text} was "
                f"accumulated in this backward and {'wrote' if self.wrote else 'read'} its `.grad`")

    def _state_text(self) -> str:
        if self.access.was_none:
            return "`.grad` was None"
        return "`.grad` still held the gradient from before this backward (stale)"

    def _why(self) -> str:
        if self.on_outputs:
            return (" (PyTorch fired the hook on the module's output gradients, before the module's own backward, "
                    "because none of its inputs requires grad)")
        return ""

    def _observation(self, message: str, observed: str) -> Observation:
        return Observation(
            code="HKL201",
            # one finding per hook and situation (None, stale; read, edited), listing the parameters
            key=("HKL201", self.rec.site, self.rec.name, self.access.was_none, self.wrote, self.on_outputs),
            site=self.rec.site,
            message=message,
            help=_PARAM_HOOK_HELP,
            expected=f"the `.grad` of {self.param_text} holds this backward's gradient when the hook runs, and "
            f"what the hook writes is what it holds after backward",
            observed=observed,
            related=(self.access.site.related("`.grad` accessed here"),),
            subject=self.param_text,
            subject_noun="parameter",
        )

    def conclude(self, task_id: int) -> Observation | None:
        if self.state.last_task != task_id:
            return None  # no gradient reached the parameter in this backward: nothing was early
        param = self.param_ref()
        if param is None:
            return None
        from hooklint.runtime.core import grad_of

        final = grad_of(param)
        if self.wrote:
            if self._edit_lost(final):
                effect = "after backward, `.grad` differs from what the hook wrote"
                if self.changed is not None:
                    effect += f" at {_plural(int(self.changed.sum()), 'element')} it changed"
                outcome = f"; the edit was lost: {effect}"
            else:
                effect = "its edit happened to survive this backward"
                outcome = f"; {effect}"
        elif self.access.was_none:
            effect = "the hook saw no gradient of this step"
            outcome = f", so {effect}"
        else:
            effect = "the hook saw an old gradient, not this step's"
            outcome = f", so {effect}"
        message = f"{self._head()}: {self._state_text()} when it ran{self._why()}{outcome}"
        return self._observation(message, f"{self._state_text()} when the hook ran; {effect}")

    def _edit_lost(self, final: torch.Tensor | None) -> bool:
        written = self.written
        if written is None:
            return final is not None
        if final is None or final.shape != written.shape or final.dtype != written.dtype:
            return True
        if self.changed is not None and bool(self.changed.any()):
            return not same_values(final[self.changed], written[self.changed])
        return not same_values(final, written)

    def conclude_failed(self, exc: BaseException) -> Observation | None:
        param = self.param_ref()
        if param is None or not param.requires_grad:
            return None
        raised = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
        message = (f"{self.rec.what()} on {self.module_text} accessed `.grad` of {self.param_text} before its "
                   f"gradient was accumulated in this backward: {self._state_text()} when it ran{self._why()}, "
                   f"and the hook raised `{raised}`")
        return self._observation(message, f"{self._state_text()} when the hook ran; it raised {type(exc).__name__}")


# -- HKL203 --------------------------------------------------------------------

_UPDATE_WORDS = {"clamp", "clamp_", "clip", "clip_", "lr", "learning_rate", "weight_decay", "wd", "decay",
                 "momentum", "step"}


def looks_like_parameter_update(names: frozenset[str] | set[str]) -> bool:
    """Optimizer-in-backward hooks and weight clipping update the parameter on
    purpose (hook-semantics: the hook may modify its argument); stay quiet then."""
    return bool(_UPDATE_WORDS & set(names))


def post_accumulate_returned(rec: "HookRecord", param: torch.Tensor, result: Any) -> Observation:
    target = rec.target_text()
    return Observation(
        code="HKL203",
        key=("HKL203", rec.site, rec.name, "return"),
        site=rec.site,
        message=f"{rec.what()} on {target} returned a `{type(result).__name__}`; a post-accumulate-grad "
        f"hook must return None (PyTorch raises `RuntimeError: Tensor post accumulate grad hooks should return "
        f"None.`)",
        help="Edit `param.grad` in place and return nothing; a post-accumulate-grad hook cannot replace the "
        "gradient.",
        expected="the hook returns None",
        observed=f"it returned a {type(result).__name__}",
        subject=target,
        subject_noun=rec.subject_noun,
    )


def post_accumulate_mutated(rec: "HookRecord", param: torch.Tensor, version: int,
                            through_data: bool = False) -> Observation:
    target = rec.target_text()
    how = "through `.data`" if through_data else f"version {version} -> {param._version}"
    named = f"; it names its argument `{rec.gradient_named}`, but" if rec.gradient_named else ":"
    return Observation(
        code="HKL203",
        key=("HKL203", rec.site, rec.name, "mutate"),
        site=rec.site,
        message=f"{rec.what()} modified its argument in place (the parameter {target} itself, {how}) "
        f"without reading `.grad`{named} the argument of a post-accumulate-grad hook is the parameter, not its "
        f"gradient: the weights changed and the gradient did not",
        help="Edit `param.grad` instead (`param.grad.mul_(0.5)`, `param.grad.clamp_(-1, 1)`), and return nothing.",
        expected="the hook edits `param.grad`",
        observed="the hook modified the parameter's values",
        subject=target,
        subject_noun=rec.subject_noun,
    )


# -- HKL302, HKL301 ------------------------------------------------------------------


def registered_after_forward(rec: "HookRecord", backward_site: Site) -> Observation:
    target = rec.target_text()
    return Observation(
        code="HKL302",
        key=("HKL302", rec.site, rec.name),
        site=rec.site,
        subject=target,
        subject_noun=rec.subject_noun,
        message=f"{rec.what()} was registered on {target} after the forward whose backward then ran "
        f"without it: module backward hooks are attached when the module runs, so it did not run in the backward "
        f"at {backward_site}",
        help="Register module backward hooks before the forward (before `output = model(input)`); they only "
        "apply to graphs built after registration.",
        expected="the hook runs in the backward of the module's forward",
        observed="the backward ran and the hook did not",
        related=(backward_site.related("the backward that ran without the hook"),),
    )


def removed_before_backward(rec: "HookRecord", removal_site: Site, backward_site: Site,
                            consumer: str) -> Observation:
    target = rec.target_text()
    return Observation(
        code="HKL301",
        key=("HKL301", removal_site, rec.site, rec.name),
        site=removal_site,
        subject=target,
        subject_noun=rec.subject_noun,
        message=f"{rec.what()} on {target} was removed before it ever ran; the backward at "
        f"{backward_site} then computed that tensor's gradient through `{consumer}`, an op that used the tensor "
        f"before the removal, without running the hook",
        help="Call `handle.remove()` after the `backward()` the hook is meant for: tensor hooks are looked up "
        "when backward runs, not when the graph is built.",
        expected="the hook runs in the backward it was registered for",
        observed="it was removed first and never ran",
        related=(rec.site.related("the hook was registered here"),
                 backward_site.related("the backward that ran without it")),
    )


# -- HKL503 ---------------------------------------------------------------------


def parameters_without_grad(info: "BackwardInfo", elsewhere=None) -> Iterator[Observation]:
    """``elsewhere(param)``: True for a parameter whose gradient an engine moves to
    another tensor (FSDP2's unsharded parameters: their `.grad` goes to the sharded one)."""
    roots: describe.Roots | None = None
    for param, node, slot, _seq in info.leaves_without_grad():
        # a post-accumulate hook may clear `.grad` on purpose (optimizer in backward)
        if not param.requires_grad or param._post_accumulate_grad_hooks:
            continue
        if elsewhere is not None and elsewhere(param):
            continue
        if roots is None:
            roots = describe.Roots.capture(info.caller)
        name = roots.parameter_name(param)
        param_text = f"parameter `{name}`" if name else f"a parameter of shape {describe.shape_text(param)}"
        node_name = node.name()
        function = getattr(node, "_forward_cls", None)
        code = getattr(getattr(function, "backward", None), "__code__", None)
        site = info.site
        why = ""
        help_text = ("Find the op that drops its gradient (a custom autograd.Function, a non-differentiable "
                     "path), or set `requires_grad=False` if the parameter is not meant to train.")
        if code is not None and not frames.is_internal(code.co_filename):
            site = frames.code_site(code)
            fn_name = function.__qualname__
            position = _function_argument(node, slot)
            arg = _argument_name(function, position)
            if position is not None:
                slot_text = f"for `{arg}` (return value {position}, while `ctx.needs_input_grad[{position}]` is True)" \
                    if arg else f"as return value {position}"
                why = f": `{fn_name}.backward` returned None {slot_text}"
            else:
                why = f": `{fn_name}.backward` returned None for it"
            help_text = (f"`{fn_name}.backward` must return one gradient per `forward` input, in the same order, "
                         f"None only for inputs that need no gradient; check which `ctx.needs_input_grad[i]` "
                         f"guards each one.")
        yield Observation(
            code="HKL503",
            key=("HKL503", site, why),
            subject=param_text,
            subject_noun="parameter",
            site=site,
            message=f"{param_text} requires grad and the forward used it (it is an input of `{node_name}`), but "
            f"after the backward at {info.site} its `.grad` is still None{why}",
            help=help_text,
            expected=f"{param_text}.grad is a tensor after backward",
            observed=f"{param_text}.grad is None",
            related=(info.site.related("the backward after which `.grad` is None"),),
        )


def _function_argument(node: Any, slot: int) -> int | None:
    """The position among ``forward``'s arguments of the tensor input in ``slot`` of
    the node's edges.  Edges exist for tensor inputs only; among inputs that need a
    gradient, edges and ``needs_input_grad`` are in the same order."""
    needs = getattr(node, "needs_input_grad", None)
    if not needs:
        return None
    rank = sum(1 for child, _nr in node.next_functions[:slot] if child is not None)
    positions = [i for i, flag in enumerate(needs) if flag]
    return positions[rank] if rank < len(positions) else None


def _argument_name(function: Any, position: int | None) -> str | None:
    if position is None:
        return None
    try:
        params = list(inspect.signature(function.forward).parameters.values())[1:]  # without ctx
    except (TypeError, ValueError):
        return None
    if position >= len(params):
        return None
    param = params[position]
    return param.name if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD) else None


# -- HKL501 (PyTorch's error on a custom Function's gradient count) ------------------------------

_GRADIENT_COUNT = re.compile(r"function (\w+) returned an incorrect number of gradients \(expected (\d+), got (\d+)\)")


def function_gradient_count(exc: BaseException, roots: list) -> Observation | None:
    """``function ScaleBackward returned an incorrect number of gradients
    (expected 2, got 1)``: the custom Function is found in the backward graph by
    its node's name, and the finding points at its ``backward``."""
    match = _GRADIENT_COUNT.search(str(exc))
    if match is None or not roots:
        return None
    node_name, expected, got = match.group(1), int(match.group(2)), int(match.group(3))
    function = _find_function(roots, node_name)
    code = getattr(getattr(function, "backward", None), "__code__", None)
    if code is None or frames.is_internal(code.co_filename):
        return None
    site = frames.code_site(code)
    fn_name = function.__qualname__
    inputs = _forward_inputs(function)
    named = f" ({', '.join(f'`{p}`' for p in inputs)})" if inputs and len(inputs) == expected else ""
    return Observation(
        code="HKL501",
        key=("HKL501", site),
        site=site,
        message=f"`{fn_name}.backward` returned {_plural(got, 'gradient')}, but `{fn_name}.apply` received "
        f"{_plural(expected, 'input')}{named}: PyTorch raised `RuntimeError: function {node_name} returned an "
        f"incorrect number of gradients (expected {expected}, got {got})` in the backward",
        help=f"Return one value per input of `{fn_name}.apply`, in order, with None for the inputs that need no "
        f"gradient (numbers, flags, tensors that do not require grad).",
        expected=f"{expected} values returned by `{fn_name}.backward`",
        observed=f"{got} values",
        raises="returned an incorrect number of gradients",
    )


def _forward_inputs(function: Any) -> list[str]:
    """The names of ``forward``'s inputs (without ``ctx`` unless the Function uses
    ``setup_context``); [] for ``*args``."""
    try:
        params = list(inspect.signature(function.forward).parameters.values())
    except (TypeError, ValueError):
        return []
    uses_setup_context = getattr(function, "setup_context", None) is not getattr(
        torch.autograd.Function, "setup_context", None)
    if not uses_setup_context:
        params = params[1:]
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return []
    return [p.name for p in params]


def _find_function(roots: list, node_name: str) -> Any:
    """The custom Function class whose backward node is named ``node_name``, met
    first on a walk of the graph from ``roots``."""
    visited = list(roots)  # held, so that the ids in `seen` stay theirs
    seen = {id(node) for node in roots}
    stack = list(roots)
    while stack:
        node = stack.pop()
        function = getattr(node, "_forward_cls", None)
        if function is not None and node.name() == node_name:
            return function
        for child, _nr in node.next_functions:
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                visited.append(child)
                stack.append(child)
    return None


# -- HKL403 (PyTorch's in-place error) ---------------------------------------------


def _hooked_module_of(value: Any, meta_key: str, view_op: str | None = None) -> tuple | None:
    """(module, side) when ``value`` is a tensor a module's full backward hooks
    wrapped, or, with ``view_op``, a view of one made by that op
    (`output[:, :1]`, "Slice")."""
    if not isinstance(value, torch.Tensor):
        return None
    node = value.grad_fn
    is_view = value._is_view()
    if view_op is not None and (node is None or not is_view or not node.name().startswith(view_op)):
        return None
    for _ in range(8):
        if node is None:
            return None
        if node.name() == "BackwardHookFunctionBackward":
            tagged = node.metadata.get(meta_key)
            if tagged is not None and tagged[0]() is not None:
                return tagged[0](), tagged[1]
            return None
        if not is_view or not node.next_functions:
            return None
        node = node.next_functions[0][0]  # a view op's first input is its base
    return None


def inplace_on_hooked_tensor(exc: BaseException, rt: "Runtime", meta_key: str,
                             direct: bool = True) -> Iterator[Observation]:
    """PyTorch's "Output 0 of BackwardHookFunction is a view and is being modified
    inplace" (``direct``), or the same for a view of such an output ("Output 0
    of Slice is a view ..."), mapped to the full backward hooks of the module."""
    tb = exc.__traceback__
    where: Site | None = None
    module = side = None
    view_op = None
    if not direct:
        match = re.search(r"Output \d+ of (\w+) is a view", str(exc))
        if match is None:
            return
        view_op = match.group(1)
    while tb is not None:
        frame = tb.tb_frame
        if not frames.is_internal(frame.f_code.co_filename):
            where = Site(frame.f_code.co_filename, tb.tb_lineno)
        for value in list(frame.f_locals.values()):
            found = _hooked_module_of(value, meta_key, view_op)
            if found is not None:
                module, side = found
        tb = tb.tb_next
    guess = ""
    if module is None and not direct:
        return  # a view of some other custom Function's output: not a hook's doing
    if module is None:
        # the tensor was a temporary (`torch.relu_(conv(x))`): fall back on the
        # last hooked module that ran in this thread, and say so
        last = rt.tls.last_hooked
        if last is None or last[0]() is None:
            return
        module, side = last[0](), last[1]
        guess = (" (the modified tensor is held by no variable; hooklint takes it for the last hooked module "
                 "that ran in this thread)")
    torch_text = str(exc).split(". ")[0]
    for rec in rt.full_hooks_at_error(module, exc):
        at = f" at {where}" if where is not None else ""
        target = rec.target_text()
        yield Observation(
            code="HKL403",
            key=("HKL403", rec.site, rec.name),
            site=rec.site,
            subject=target,
            subject_noun="module",
            message=f"{rec.what()} is registered on {target}, and the module's {side} was then "
            f"modified in place{at}, which PyTorch rejects: `RuntimeError: {torch_text}`{guess}",
            help="Do not modify a hooked module's output (or input) in place: use `nn.ReLU(inplace=False)` after "
            "it, write `x = x + y` instead of `x += y`, or clone the tensor first.",
            expected=f"the module's {side} is not modified in place",
            observed=f"an in-place op on it raised RuntimeError{at}",
            related=(where.related("the in-place operation"),) if where is not None else (),
        )
