"""Assertion helpers for test suites, in the style of ``torch.testing``.

Each helper raises ``AssertionError`` with a message that stands alone: the
finding, where the hook was registered (or defined), what was expected, what
was observed, and how to fix it.  Their own frames are hidden from pytest
tracebacks.

Importing this module does not import torch; calling a helper does.

The helpers that run the model (``assert_hooks_ok``,
``assert_grad_edits_take_effect``) do real forward and backward passes, so
the hooks run, with their side effects.  The model's parameters, buffers and
``.grad`` are restored afterwards.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

__all__ = ["assert_hooks_ok", "assert_no_legacy_hooks", "assert_grad_edits_take_effect"]

GRAD_EDIT_CODES = ("HKL201", "HKL203", "HKL401")


def assert_hooks_ok(model: Any, *example_inputs: Any, loss_fn: Callable[[Any], Any] | None = None,
                    select: Iterable[str] | None = None, ignore: Iterable[str] = (), steps: int = 2) -> None:
    """Run ``steps`` forward and backward passes of ``model`` on ``example_inputs``
    under instrumentation and fail if any hook problem was observed.

    Gradients are not zeroed between the steps, as in gradient accumulation, so
    a hook that runs before its parameters' gradients are accumulated sees a
    stale `.grad` on the second step and its edit is lost.  ``loss_fn`` maps the
    model's output to a scalar (default: the sum of every floating-point output
    tensor).  ``select``/``ignore`` take rule selectors (``HKL2``, ``HKL304``).
    """
    __tracebackhide__ = True
    session, error = _exercise(model, example_inputs, loss_fn, steps, select, ignore)
    _raise_if_observed(session, error, f"hooks of {type(model).__name__}", steps)


def assert_grad_edits_take_effect(model: Any, *example_inputs: Any,
                                  loss_fn: Callable[[Any], Any] | None = None, steps: int = 2) -> None:
    """Fail if a hook's edit of a gradient does not end up in the gradient: a module
    backward hook that edits `.grad` before it is accumulated (HKL201), a
    post-accumulate-grad hook that edits the parameter instead of its `.grad`
    (HKL203), a hook that edits its gradient argument in place (HKL401)."""
    __tracebackhide__ = True
    session, error = _exercise(model, example_inputs, loss_fn, steps, list(GRAD_EDIT_CODES), ())
    _raise_if_observed(session, error, f"gradient edits of {type(model).__name__}", steps)


def assert_no_legacy_hooks(model: Any) -> None:
    """Fail if ``model`` or one of its submodules has a legacy backward hook
    (``register_backward_hook``), or one is registered globally
    (``register_module_backward_hook``).  Runs nothing."""
    __tracebackhide__ = True
    from torch.nn.modules import module as module_mod

    from hooklint.runtime.describe import Roots, callable_site_text, describe_module, hook_name
    from hooklint.runtime.frames import user_frame

    roots = Roots.capture(user_frame(1))
    found: list[str] = []
    for module in model.modules():
        if module._is_full_backward_hook is False:
            for hook in module._backward_hooks.values():
                hook = getattr(hook, "__wrapped__", hook)
                where = callable_site_text(hook)
                found.append(f"{describe_module(module, roots)}: `{hook_name(hook)}`"
                             + (f", defined at {where}" if where else ""))
    if module_mod._global_is_full_backward_hook is False:
        for hook in module_mod._global_backward_hooks.values():
            hook = getattr(hook, "__wrapped__", hook)
            where = callable_site_text(hook)
            found.append(f"every module (register_module_backward_hook): `{hook_name(hook)}`"
                         + (f", defined at {where}" if where else ""))
    if not found:
        return
    from hooklint.rules import get_rule

    rule = get_rule("HKL101")
    lines = [f"Legacy backward hooks found: {len(found)} on {type(model).__name__}.", ""]
    lines += [f"{rule.code} {rule.name}: {entry}" for entry in found]
    lines += [
        "",
        "expected: no `register_backward_hook` / `register_module_backward_hook` hooks",
        "observed: legacy hooks, which bind to the last autograd op of each module's forward, so their "
        "grad_input is that op's, not the module's",
        "fix: use `register_full_backward_hook` (same signature); its grad_input and grad_output are the "
        "module's real input and output gradients",
        f"docs: {rule.url()}",
    ]
    raise AssertionError("\n".join(lines))


# -- shared ----------------------------------------------------------------------


def _exercise(model, example_inputs, loss_fn, steps, select, ignore):
    import torch

    from hooklint.runtime.session import Session

    if steps < 1:
        raise ValueError("steps must be at least 1")
    saved = _save_state(model)
    session = Session(select, ignore)
    error: BaseException | None = None
    session.start()
    try:
        session.watch(model)
        for _ in range(steps):
            output = model(*example_inputs)
            loss = loss_fn(output) if loss_fn is not None else _default_loss(output)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TypeError("loss_fn must return a scalar tensor")
            loss.backward()
    except Exception as exc:  # noqa: BLE001 - a hook that raises is often the finding itself
        from hooklint.runtime.frames import drop_hooklint_frames

        error = exc
        session.observe_exception(exc)
        drop_hooklint_frames(exc)  # raised again below: from the user's call to the user's hook
    finally:
        session.stop()
        _restore_state(saved)
    return session, error


def _raise_if_observed(session, error: BaseException | None, what: str, steps: int) -> None:
    __tracebackhide__ = True
    observations = session.observations
    if not observations:
        if error is not None:
            raise error
        return
    message = format_observations(observations, f"{what} are not OK", steps, error)
    if error is not None:
        raise AssertionError(message) from error
    raise AssertionError(message)


def format_observations(observations, title: str, steps: int | None = None,
                        error: BaseException | None = None) -> str:
    """The message the helpers (and the pytest plugin) print: one block per finding."""
    from hooklint.runtime.observation import rule_for

    n = len(observations)
    passes = f" in {steps} forward and backward pass{'es' if steps != 1 else ''}" if steps else ""
    lines = [f"{title}: {n} finding{'s' if n != 1 else ''}{passes}."]
    for obs in observations:
        rule = rule_for(obs.code)
        name = f" {rule.name}" if rule is not None else ""
        source = obs.site.text()
        lines += ["", f"{obs.code}{name}: {obs.full_message}"]
        lines.append(f"  at: {obs.site.path}:{obs.site.line}" + (f": {source}" if source else ""))
        for related in obs.related:
            lines.append(f"  note: {related.message} ({related.path}:{related.location.row})")
        if obs.expected:
            lines.append(f"  expected: {obs.expected}")
        if obs.observed:
            lines.append(f"  observed: {obs.observed}")
        if obs.help:
            lines.append(f"  fix: {obs.help}")
        if rule is not None:
            lines.append(f"  docs: {rule.url()}")
    if error is not None:
        lines += ["", f"The run stopped with {type(error).__name__}: {error}"]
    return "\n".join(lines)


def _default_loss(output):
    import torch

    tensors = [t for t in _flatten(output)
               if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())]
    if not tensors:
        raise TypeError("the model's output has no tensor that requires grad; pass loss_fn=")
    total = tensors[0].real.sum() if tensors[0].is_complex() else tensors[0].sum()
    for t in tensors[1:]:
        total = total + (t.real.sum() if t.is_complex() else t.sum())
    return total


def _flatten(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _flatten(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _flatten(v)
    else:
        yield value


def _save_state(model):
    import torch

    saved = []
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            saved.append((tensor, tensor.detach().clone(), tensor.grad))
            tensor.grad = None  # the run starts as after zero_grad(); the saved gradient stays untouched
    return saved


def _restore_state(saved) -> None:
    import torch

    with torch.no_grad():
        for tensor, value, grad in saved:
            tensor.copy_(value)
            tensor.grad = grad
