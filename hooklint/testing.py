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

__all__ = ["assert_hooks_ok", "assert_no_legacy_hooks", "assert_grad_edits_take_effect",
           "assert_hooks_ok_distributed"]

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


def assert_hooks_ok_distributed(build_model: Callable[[], Any] | str, example_inputs: Any, world_size: int = 2,
                                wrap: str | None = "ddp", *, loss_fn: Callable[[Any], Any] | str | None = None,
                                select: Iterable[str] | None = None, ignore: Iterable[str] = (), steps: int = 2,
                                backend: str = "gloo", timeout: float = 180.0, seed: int = 0) -> None:
    """Build the model on ``world_size`` local ranks, wrap it in DDP (``wrap="ddp"``) or
    shard it with FSDP2 (``wrap="fsdp2"``: ``fully_shard`` on every direct child that
    holds parameters, then on the model), or take it as ``build_model`` returns it
    (``wrap=None``: it wraps the model itself and registers hooks that must come
    after wrapping, such as post-accumulate-grad hooks on FSDP2's sharded
    parameters; the process group exists when it is called), run ``steps`` forward
    and backward passes
    under instrumentation in every rank, and fail if any hook problem was observed
    on any rank (HKL601 compares the gradients across ranks after each backward).

    The ranks are separate processes started through PyTorch's launcher
    (``torch.distributed.run``, a free port picked for the rendezvous), so
    ``build_model`` (and ``loss_fn``) must be importable there: a function defined
    at the top level of an importable module (a test module is fine), or a
    ``"package.module:function"`` string; not a lambda, a nested function or a
    function of ``__main__``.  ``torch.manual_seed(seed)`` runs before it on every
    rank, so the replicas start equal.  ``example_inputs`` (a tensor or a tuple of
    arguments) must pickle; each rank gets its own rows of every tensor (dim 0, as
    a DistributedSampler would give them) when every tensor has at least one row
    per rank, else the whole inputs.  ``backend="nccl"`` needs one GPU per rank.
    Every process started is ended, also when a rank fails or hangs (``timeout``
    seconds for the whole run).
    """
    __tracebackhide__ = True
    import os
    import pickle
    import shutil
    import sys
    import tempfile

    from hooklint.config import resolve_codes, validate_selectors
    from hooklint.runtime.distributed_launch import launch, merged

    if wrap not in ("ddp", "fsdp2", None):
        raise ValueError(f'wrap must be "ddp", "fsdp2" or None, not {wrap!r}')
    if world_size < 1:
        raise ValueError("world_size must be at least 1")
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f'backend must be "gloo" or "nccl", not {backend!r}')
    if backend == "nccl":
        import torch

        if not torch.cuda.is_available() or torch.cuda.device_count() < world_size:
            raise ValueError(f"backend='nccl' needs {world_size} GPUs; this machine has "
                             f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} (use backend='gloo')")
    select_list = list(select) if select is not None else None
    ignore_list = list(ignore)
    if select_list is not None:
        validate_selectors(select_list, "select")
    validate_selectors(ignore_list, "ignore")
    codes = resolve_codes(select_list, [], ignore_list)
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    spec = {
        "build_model": _callable_reference(build_model, "build_model"),
        "loss_fn": _callable_reference(loss_fn, "loss_fn") if loss_fn is not None else None,
        "example_inputs": inputs,
        "wrap": wrap,
        "steps": steps,
        "backend": backend,
        "seed": seed,
        "sys_path": [os.path.abspath(p) if p else os.getcwd() for p in sys.path],
    }
    try:
        payload = pickle.dumps(spec)
    except Exception as exc:  # noqa: BLE001 - said plainly: the inputs cannot reach the ranks
        raise TypeError(f"example_inputs must pickle to reach the ranks: {type(exc).__name__}: {exc}") from None
    folder = tempfile.mkdtemp(prefix="hooklint-dist-")
    try:
        with open(os.path.join(folder, "spec.pkl"), "wb") as f:
            f.write(payload)
        outcome = launch([], world_size, mode="check", codes=codes, timeout=timeout, folder=folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    name = spec["build_model"].rsplit(":", 1)[-1]
    engine = {"ddp": " under DDP", "fsdp2": " under FSDP2", None: ""}[wrap]
    what = f"hooks of `{name}()`{engine} on {world_size} ranks"
    if outcome.timed_out:
        raise AssertionError(f"{what}: the run did not finish within {timeout:g} s (a rank hung?); the launcher "
                             f"and every rank were stopped.")
    observations, _notices = merged(outcome)
    errors = [(rank, result.error) for rank, result in sorted(outcome.results.items()) if result.error]
    if observations:
        message = format_observations(observations, f"{what} are not OK", steps)
        if errors:
            message += f"\n\nrank {errors[0][0]} stopped with:\n{errors[0][1].rstrip()}"
        raise AssertionError(message)
    if errors:
        rank, text = errors[0]
        raise AssertionError(f"{what}: rank {rank} raised, and no hook problem explains it:\n{text.rstrip()}")
    if outcome.missing:
        raise AssertionError(f"{what}: rank{'s' if len(outcome.missing) > 1 else ''} "
                             f"{', '.join(map(str, outcome.missing))} ended without a result (exit status "
                             f"{outcome.launcher_code} from the launcher); see the output above.")


def _callable_reference(fn: Any, what: str) -> str:
    """``"module:qualname"`` for a function the ranks can import."""
    if isinstance(fn, str):
        module, _, name = fn.partition(":")
        if not module or not name:
            raise ValueError(f'{what} as a string must be "package.module:function", not {fn!r}')
        return fn
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not callable(fn) or module is None or qualname is None:
        raise TypeError(f"{what} must be a function defined at the top level of a module, or a "
                        f'"package.module:function" string, not {type(fn).__name__}')
    if "<locals>" in qualname or qualname == "<lambda>" or qualname.endswith("<lambda>"):
        raise TypeError(f"{what} must be importable by the ranks: `{qualname}` is a lambda or a nested function; "
                        f"define it at the top level of a module, or pass \"{module}:name\"")
    if module == "__main__":
        raise TypeError(f"{what} must be importable by the ranks: `{qualname}` is defined in __main__; move it into "
                        f"a module, or pass \"package.module:{qualname}\"")
    return f"{module}:{qualname}"


def _resolve_callable(reference: str, what: str) -> Callable:
    import importlib

    module_name, _, qualname = reference.partition(":")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"{what} {reference!r}: cannot import {module_name!r} in the rank ({exc})") from exc
    for part in qualname.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AttributeError(f"{what} {reference!r}: {module_name!r} has no {qualname!r}") from None
    if not callable(value):
        raise TypeError(f"{what} {reference!r} is not callable")
    return value


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
