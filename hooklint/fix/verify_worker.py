"""The proof of a fix, run in a worker subprocess: ``python -m hooklint.fix.verify_worker MEMORY_MIB``.

It speaks the graph worker's protocol (``hooklint.graph.worker``: a ``ready``
event, then one JSON request per line on stdin, ``stage`` and ``result``
events on the file descriptor ``HOOKLINT_RESULT_FD``) and uses the graph
layer's way into the user's code (``hooklint.graph.build``: the file's
definitions only, under the same guard, timeout and memory limit).  A request
names one file and the proofs of the fixes planned for it
(:mod:`hooklint.fix.verify` writes them); the reply has one verdict per proof.

A proof of an HKL101 fix builds the model the graph layer built, three times
from the same seed, and runs one forward and one backward on the same
example input each time:

1. *reference*: no hook of the user's; forward hooks on the hooked module
   capture the true gradients of its output (its output is replaced by a
   clone, so in-place ops after it leave the captured tensor alone) and of
   its inputs;
2. *original*: the registration as written, with the user's hook wrapped by
   a probe that records what the hook receives and then calls it;
3. *fixed*: the registration as the fix writes it, same probe.

The fix passes when the fixed run completes and every ``grad_output`` the
hook receives is the module's true output gradient (and, when the hook reads
``grad_input``, every ``grad_input`` entry its true input gradient).

A registration that building the model runs (``self.conv.register_backward_hook``
in ``__init__``) is proven in place: the model is built from the original
text and from the fixed text, and the registration API is patched for calls
from the registration's lines only, to put the probe around the hook.  Any
other registration is replayed on the built model: the receiver is the
module the graph linked it to, and the hook is the file's own (evaluated in
the file's definitions) when that works, else the probe alone.
"""

from __future__ import annotations

from hooklint.safe_path import drop_working_folder

drop_working_folder()

# (the imports below come after the working folder left sys.path)
import ast
import os
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

MODULE_NAME = "__hooklint_module__"
HOOK_NAME = "__hooklint_hook__"
# What a legacy hook and its two fixes register through (Module methods).
LEGACY_APIS = ("register_backward_hook",)
FULL_APIS = ("register_full_backward_hook",)
RTOL, ATOL = 1e-4, 1e-6


class ProofError(Exception):
    """The proof could not be made (not a verdict on the fix)."""


@dataclass
class Call:
    path: str
    grad_input: tuple | None
    grad_output: tuple | None


@dataclass
class Probe:
    """Stands in front of the user's hook: records its arguments, then calls it."""

    hook: Callable | None
    paths: dict[int, str]
    calls: list[Call] = field(default_factory=list)
    call_user: bool = True
    hook_error: str | None = None

    def wrap(self, hook: Callable | None) -> Callable:
        def probe(module, grad_input, grad_output):
            self.calls.append(Call(self.paths.get(id(module), "?"), _snapshot(grad_input), _snapshot(grad_output)))
            target = hook if hook is not None else self.hook
            if target is None or not self.call_user:
                return None
            try:
                return target(module, grad_input, grad_output)
            except BaseException as exc:
                from hooklint.graph.trace import one_line

                self.hook_error = self.hook_error or one_line(exc)
                raise

        return probe


def _snapshot(grads: Any) -> tuple | None:
    import torch

    if grads is None:
        return None
    return tuple(g.detach().clone() if isinstance(g, torch.Tensor) else None for g in grads)


class _NullHandle:
    def remove(self) -> None:
        pass


@contextmanager
def spy(filename: str, rows: tuple[int, int], apis: tuple[str, ...], action: Callable | None,
        seen: list) -> Iterator[None]:
    """Patch ``nn.Module``'s registration methods for calls made from
    ``filename`` at ``rows``: ``action(hook)`` replaces the hook (None: the
    registration is skipped).  Every module registered on is added to ``seen``."""
    from torch import nn

    saved = {name: getattr(nn.Module, name) for name in apis}

    def patched_for(name: str):
        original = saved[name]

        def patched(module, hook, *args, **kwargs):
            caller = sys._getframe(1)
            if caller.f_code.co_filename == filename and rows[0] <= caller.f_lineno <= rows[1]:
                seen.append(module)
                if action is None:
                    return _NullHandle()
                hook = action(hook)
            return original(module, hook, *args, **kwargs)

        return patched

    for name in apis:
        setattr(nn.Module, name, patched_for(name))
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(nn.Module, name, original)


# ---------------------------------------------------------------- building


@dataclass
class Definitions:
    namespace: dict[str, Any]
    plan: Any  # hooklint.graph.plan.Plan


def fixed_definitions(session, text: str, guard) -> Definitions:
    """The definitions of the fixed text, executed as the graph layer executes
    the original's (same file name, package and import hook)."""
    from hooklint.graph.build import user_error
    from hooklint.graph.plan import plan_for

    tree = ast.parse(text, str(session.path))
    plan = plan_for(tree, getattr(session, "context", None))  # the project's imports, as for the original
    name = session.unique_name + "fixed__"
    module = types.ModuleType(name)
    module.__file__ = str(session.path)
    module.__package__ = session.module.__package__
    sys.modules[name] = module
    try:
        with guard.running_user_code():
            exec(compile(plan.sanitized.tree, str(session.path), "exec"), module.__dict__)  # noqa: S102
    except BaseException as exc:  # noqa: BLE001
        raise ProofError(f"importing the fixed file's definitions failed: {user_error(exc)}") from None
    return Definitions(module.__dict__, plan)


def build_model(definitions: Definitions, spec: dict[str, Any], guard) -> Any:
    """A fresh instance of the model the graph layer analysed, from the same seed."""
    import torch
    from torch import nn

    from hooklint.graph.build import rebuild_model

    torch.manual_seed(0)
    source = spec["source"]
    try:
        with guard.running_user_code():
            value = rebuild_model(definitions.namespace, definitions.plan, spec, definitions.namespace["__file__"])
    except LookupError as exc:
        raise ProofError(str(exc)) from None
    if not isinstance(value, nn.Module):
        raise ProofError(f"`{source}` did not build an nn.Module")
    return value


def example_inputs(model: Any, spec: dict[str, Any]) -> tuple[Any, ...]:
    """The input the graph layer ran the model on (same dtypes and shapes).
    Each run gets fresh copies whose floating-point tensors require grad, as
    in the graph analysis: the hook then sees every gradient it can get (a
    first layer's input gradient too), and a hook that reads them runs."""
    import torch

    from hooklint.graph.trace import input_candidates, spec_of

    wanted = [(s[0], tuple(s[1])) for s in spec.get("inputs", [])]
    torch.manual_seed(0)
    candidates = input_candidates(model, None)
    if not isinstance(candidates, str):
        for inputs, _origin in candidates.tuples:
            if [(s.dtype, tuple(s.shape)) for s in spec_of(inputs)] == wanted:
                return tuple(inputs)
    if not wanted:
        raise ProofError("the graph analysis ran no example input for this model")
    out = []
    for dtype_name, shape in wanted:
        dtype = getattr(torch, dtype_name)
        out.append(torch.randn(shape, dtype=dtype) if dtype.is_floating_point else torch.zeros(shape, dtype=dtype))
    return tuple(out)


# ---------------------------------------------------------------- one run


@dataclass
class RunResult:
    error: str | None = None
    stage: str = ""  # "registration", "forward", "backward"


def _tensors(value: Any) -> list:
    from hooklint.graph.trace import tensors_in

    return tensors_in(value)


def _loss(output: Any):
    """A weighted sum of the output: every element gets its own gradient, so a
    wrong gradient cannot hide behind a uniform one."""
    import torch

    generator = torch.Generator().manual_seed(1234)
    total = None
    for tensor in _tensors(output):
        if not tensor.requires_grad or not (tensor.is_floating_point() or tensor.is_complex()):
            continue
        weight = torch.randn(tensor.shape, generator=generator, dtype=torch.float32).to(tensor.dtype)
        term = (tensor * weight).sum()
        total = term if total is None else total + term
    return total


def run_once(model: Any, inputs: tuple, guard, after_forward: Callable | None = None) -> RunResult:
    import torch

    from hooklint.graph.trace import _prepared, one_line

    torch.manual_seed(1)
    try:
        with guard.running_user_code():
            output = model(*_prepared(inputs))
    except BaseException as exc:  # noqa: BLE001 - the verdict is the failure
        return RunResult(one_line(exc), "forward")
    loss = _loss(output)
    if loss is None:
        return RunResult("the model's output needs no gradient, so no backward hook runs", "output")
    try:
        with guard.running_user_code():
            if after_forward is not None:
                after_forward(loss)
            else:
                loss.backward()
    except BaseException as exc:  # noqa: BLE001
        return RunResult(one_line(exc), "backward")
    return RunResult()


@dataclass
class Truth:
    outputs: dict[str, list] = field(default_factory=dict)  # path -> output gradient per call
    inputs: dict[str, list] = field(default_factory=dict)  # path -> [input gradients] per call


def reference(model: Any, inputs: tuple, targets: dict[str, Any], guard) -> tuple[Truth, RunResult]:
    """The true gradients of each target module's output and inputs."""
    import torch

    from hooklint.graph.trace import hooked_tensor

    captured: list[tuple[str, str, Any]] = []  # (path, "output"|"input", tensor)

    def pre_for(path: str):
        def pre(module, args):
            new = []
            for value in args:
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    value = value.clone()
                    captured.append((path, "input", value))
                new.append(value)
            return tuple(new)

        return pre

    def post_for(path: str):
        def post(module, args, output):
            tensor = hooked_tensor(output)
            if tensor is None or not tensor.requires_grad:
                return None
            captured.append((path, "output", tensor))
            replacement = tensor.clone()
            if output is tensor:
                return replacement
            if isinstance(output, tuple) and output and output[0] is tensor:
                return (replacement,) + tuple(output[1:])
            if isinstance(output, list) and output and output[0] is tensor:
                return [replacement] + list(output[1:])
            return None

        return post

    handles = []
    for path, module in targets.items():
        handles.append(module.register_forward_pre_hook(pre_for(path)))
        handles.append(module.register_forward_hook(post_for(path)))
    truth = Truth()

    def gradients(loss) -> None:
        if not captured:
            return
        grads = torch.autograd.grad(loss, [t for _, _, t in captured], allow_unused=True)
        for (path, kind, _tensor), grad in zip(captured, grads):
            if kind == "output":
                truth.outputs.setdefault(path, []).append(grad)
            else:
                truth.inputs.setdefault(path, []).append(grad)

    result = run_once(model, inputs, guard, after_forward=gradients)
    for handle in handles:
        handle.remove()
    return truth, result


# ---------------------------------------------------------------- the proof


def _paths(model: Any) -> dict[int, str]:
    return {id(m): p for p, m in model.named_modules(remove_duplicate=False)}


def _same(a: Any, b: Any) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(torch.allclose(a.to(b.dtype), b, rtol=RTOL, atol=ATOL))


def _difference(a: Any, b: Any) -> str:
    if a is None or b is None:
        return f"{'None' if a is None else 'a tensor'} where the module's gradient is {'None' if b is None else 'a tensor'}"
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} where the module's gradient has shape {tuple(b.shape)}"
    return f"values off by up to {float((a.double() - b.double()).abs().max()):.3g}"


def _module_words(path: str, model: Any) -> str:
    module = model.get_submodule(path) if path else model
    return f"`{path}` ({type(module).__name__})" if path else f"the model ({type(module).__name__})"


def grad_input_change(before: Probe, after: Probe) -> str | None:
    """Where the shapes of ``grad_input`` differ between the original registration
    (``before``) and the fixed one: "`block` from (2, 16, 8, 8) to (2, 8, 8, 8)"."""
    for old, new in zip(before.calls, after.calls):
        old_shapes = [tuple(g.shape) for g in (old.grad_input or ()) if g is not None]
        new_shapes = [tuple(g.shape) for g in (new.grad_input or ()) if g is not None]
        if old_shapes != new_shapes:
            def text(shapes: list) -> str:
                return ", ".join(str(shape) for shape in shapes) or "nothing"

            return f"`{new.path}` from {text(old_shapes)} to {text(new_shapes)}"
    return None


def check_calls(probe: Probe, truth: Truth, reads_grad_input: bool, hook_name: str) -> str | None:
    """Why the hook's arguments are not the module's gradients, or None."""
    unmatched = {path: list(grads) for path, grads in truth.outputs.items()}
    for call in probe.calls:
        options = unmatched.get(call.path, [])
        received = call.grad_output[0] if call.grad_output else None
        match = next((i for i, g in enumerate(options) if _same(received, g)), None)
        if match is None:
            if not options:
                return f"`{hook_name}` ran for `{call.path}`, whose output gradient the reference run did not see"
            return (f"the grad_output `{hook_name}` receives on `{call.path}` is not the gradient of the module's "
                    f"output ({_difference(received, options[0])})")
        options.pop(match)
        if reads_grad_input:
            truths = truth.inputs.get(call.path, [])
            given = [g for g in (call.grad_input or ()) if g is not None]
            if len(given) != len(truths) or not all(_same(a, b) for a, b in zip(given, truths)):
                shapes = ", ".join(str(tuple(g.shape)) for g in given) or "nothing"
                want = ", ".join(str(tuple(g.shape)) for g in truths if g is not None) or "nothing"
                return (f"the grad_input `{hook_name}` receives on `{call.path}` ({shapes}) is not the gradient of "
                        f"the module's inputs ({want})")
    return None


def prove(session, proof: dict[str, Any], guard, stage: Callable[[str], None]) -> dict[str, Any]:
    """The verdict on one fix: {"id", "status", "detail"}."""
    from hooklint.graph.build import user_error

    verdict = {"id": proof["id"], "status": "unverified", "detail": ""}
    try:
        status, detail = _prove(session, proof, guard, stage)
    except ProofError as exc:
        status, detail = "unverified", str(exc)
    except Exception as exc:  # noqa: BLE001 - the user's code failed outside the runs
        status, detail = "unverified", f"the proof could not run: {user_error(exc)}"
    verdict.update(status=status, detail=detail)
    return verdict


def _prove(session, proof: dict[str, Any], guard, stage: Callable[[str], None]) -> tuple[str, str]:
    filename = str(session.path)
    original = Definitions(session.namespace, session.plan)
    spec = proof["model"]
    label = proof["label"]
    rows = tuple(proof["rows"])
    fixed_rows = tuple(proof["fixed_rows"])
    hook_name = proof["hook_name"]

    stage(f"proving the {label}: building {spec['source']}")
    seen: list = []
    # Is the registration part of building the model?  Either way this
    # instance has no hook of the user's: it is the reference.
    with spy(filename, rows, LEGACY_APIS, None, seen):
        model = _build(original, spec, guard)
    in_build = bool(seen)
    inputs = example_inputs(model, spec)
    paths = _paths(model)
    if in_build:
        targets = {paths[id(m)]: m for m in seen if id(m) in paths}
        if not targets:
            raise ProofError("building the model registers the hook on a module outside the model")
    else:
        targets = {}
        for path in proof["paths"]:
            try:
                targets[path] = model.get_submodule(path) if path else model
            except AttributeError:
                raise ProofError(f"the model has no module `{path}`") from None
    target_paths = sorted(targets)

    stage(f"proving the {label}: reference run")
    truth, result = reference(model, inputs, {p: (model.get_submodule(p) if p else model) for p in target_paths},
                              guard)
    if result.error is not None:
        raise ProofError(f"the model does not run without the hook ({result.stage}: {result.error})")

    hook = None if in_build else _user_hook(proof, original.namespace, guard)
    fixed_defs = fixed_definitions(session, proof["fixed_text"], guard) if in_build else None

    def run_original(call_user: bool) -> tuple[Probe, RunResult]:
        stage(f"proving the {label}: the original registration")
        if in_build:
            probe = Probe(None, {}, call_user=call_user)
            with spy(filename, rows, LEGACY_APIS, probe.wrap, []):
                model = _build(original, spec, guard)
        else:
            model = _build(original, spec, guard)
            probe = Probe(hook, {}, call_user=call_user)
            error = _replay(proof["original_call"], original.namespace, model, target_paths, probe, guard)
            if error is not None:
                return probe, RunResult(error, "registration")
        probe.paths = _paths(model)
        return probe, run_once(model, inputs, guard)

    def run_fixed(call_user: bool) -> tuple[Probe, RunResult]:
        stage(f"proving the {label}: the fixed registration")
        probe = Probe(hook if not in_build else None, {}, call_user=call_user)
        if in_build:
            assert fixed_defs is not None
            namespace = fixed_defs.namespace
            with _helper_probe(namespace, proof, filename, fixed_rows, probe), \
                    spy(filename, fixed_rows, FULL_APIS, probe.wrap, []):
                model = _build(fixed_defs, spec, guard)
        else:
            model = _build(original, spec, guard)
            namespace = dict(original.namespace)
            if proof.get("helper"):
                with guard.running_user_code():
                    exec(compile(proof["helper"], filename, "exec"), namespace)  # noqa: S102 - hooklint's own code
            error = _replay(proof["fixed_call"], namespace, model, target_paths, probe, guard)
            if error is not None:
                return probe, RunResult(error, "registration")
        probe.paths = _paths(model)
        return probe, run_once(model, inputs, guard)

    note = ""
    before, before_run = run_original(True)
    if before.hook_error is not None:
        note = f"; `{hook_name}` itself could not run here ({before.hook_error}), so only what it receives was checked"
        before, before_run = run_original(False)
        after, after_run = run_fixed(False)
    else:
        after, after_run = run_fixed(True)
        if hook is None and not in_build:
            note = f"; `{hook_name}` itself is not reachable from the file's definitions, so only what it " \
                   f"receives was checked"
    if after_run.error is not None:
        if after.hook_error is not None and before_run.error is None:
            return "failed", f"`{hook_name}` raises with the fixed registration: {after.hook_error}"
        where = {"forward": "the forward pass fails", "backward": "the backward pass fails",
                 "registration": "the fixed registration fails", "output": "nothing to differentiate"}
        if before_run.error is not None and before_run.stage == after_run.stage:
            raise ProofError(f"the original code fails the same way ({before_run.stage}: {before_run.error})")
        return "failed", f"{where.get(after_run.stage, after_run.stage)} with the fix: {after_run.error}"
    if not after.calls:
        if before.calls:
            return "failed", f"`{hook_name}` no longer runs with the fix"
        raise ProofError(f"`{hook_name}` did not run on the example input, with or without the fix")
    wrong = check_calls(after, truth, proof["reads_grad_input"], hook_name)
    if wrong is not None:
        return "failed", wrong
    if proof["reads_grad_input"] and note:
        changed = grad_input_change(before, after)
        if changed is not None:
            # the hook's own code did not run here, and what it reads changes shape: code that
            # uses it (a Grad-CAM's `weights * activations`) may break, which no run here shows
            raise ProofError(f"the fix changes the `grad_input` `{hook_name}` reads on {changed}, and "
                             f"`{hook_name}` itself could not be run here to show that its code still works")
    where = ", ".join(_module_words(p, model) for p in target_paths)
    inputs_text = ", ".join(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}" for t in _tensors(inputs))
    what = "the gradients of its output and inputs" if proof["reads_grad_input"] else "the gradient of its output"
    built = f"{spec['class_name']}()" if spec["source"] == "a no-argument constructor" else spec["source"]
    return "verified", (f"the fixed code runs a forward and backward of {built} on {inputs_text or 'no input'}"
                        f", and `{hook_name}` receives {what} on {where}{note}")


def _build(definitions: Definitions, spec: dict[str, Any], guard) -> Any:
    from hooklint.graph.build import user_error

    try:
        return build_model(definitions, spec, guard)
    except ProofError:
        raise
    except BaseException as exc:  # noqa: BLE001
        raise ProofError(f"building {spec['source']} failed: {user_error(exc)}") from None


def _user_hook(proof: dict[str, Any], namespace: dict[str, Any], guard) -> Callable | None:
    """The user's hook, when its expression means something in the file's definitions."""
    text = proof.get("hook_text")
    if not text:
        return None
    try:
        with guard.running_user_code():
            value = eval(compile(text, namespace["__file__"], "eval"), dict(namespace))  # noqa: S307
    except BaseException:  # noqa: BLE001 - `self.save`, a local closure: not reachable here
        return None
    return value if callable(value) else None


def _replay(call_text: str, namespace: dict[str, Any], model: Any, paths: list[str], probe: Probe,
            guard) -> str | None:
    from hooklint.graph.trace import one_line

    code = compile(call_text, namespace.get("__file__", "<fix>"), "eval")
    for path in paths:
        scope = dict(namespace)
        scope[MODULE_NAME] = model.get_submodule(path) if path else model
        scope[HOOK_NAME] = probe.wrap(None)
        try:
            with guard.running_user_code():
                eval(code, scope)  # noqa: S307 - the registration, as written and as fixed
        except BaseException as exc:  # noqa: BLE001
            return one_line(exc)
    return None


@contextmanager
def _helper_probe(namespace: dict[str, Any], proof: dict[str, Any], filename: str, rows: tuple[int, int],
                  probe: Probe) -> Iterator[None]:
    """Put the probe around the hook given to the fix's helper at the registration's lines."""
    name = proof.get("helper_name")
    helper = namespace.get(name) if name else None
    if helper is None:
        yield
        return

    def wrapped(hook):
        caller = sys._getframe(1)
        if caller.f_code.co_filename == filename and rows[0] <= caller.f_lineno <= rows[1]:
            hook = probe.wrap(hook)
        return helper(hook)

    namespace[name] = wrapped
    try:
        yield
    finally:
        namespace[name] = helper


# ---------------------------------------------------------------- the worker loop


def verify_file(path: str, root: str, proofs: list[dict[str, Any]], guard, stage,
                pythonpath: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    from hooklint.graph.build import exec_definitions, file_session, user_error

    with file_session(Path(path), Path(root), pythonpath) as session:
        try:
            with guard.running_user_code():
                exec_definitions(session)
        except BaseException as exc:  # noqa: BLE001
            reason = f"importing the file's definitions failed: {user_error(exc, session.plan.sanitized.skipped_names)}"
            return {"verdicts": [{"id": p["id"], "status": "unverified", "detail": reason} for p in proofs],
                    "deps": session.importer.deps}
        verdicts = [prove(session, proof, guard, stage) for proof in proofs]
        # the fixed definitions were loaded under a name of their own
        for name in [n for n in sys.modules if n.startswith(session.unique_name)]:
            del sys.modules[name]
        return {"verdicts": verdicts, "deps": session.importer.deps}


def handle_request(request: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """One file's proofs, or one run of a program (``"kind": "program"``,
    :mod:`hooklint.fix.program`), in the process forked for it."""
    from hooklint.graph.guard import Guard

    if request.get("kind") == "program":
        from hooklint.fix.program import run_program

        return run_program(request, send)
    guard = Guard(os.environ.get("HOOKLINT_SCRATCH"))

    def stage(what: str) -> None:
        send({"event": "stage", "what": what})

    try:
        return verify_file(request["path"], request["root"], request["proofs"], guard, stage,
                           request.get("pythonpath", []))
    except Exception as exc:  # noqa: BLE001 - hooklint's own failure: say so
        from hooklint.graph.trace import one_line

        reason = f"internal error in the proof ({one_line(exc)}); please report it"
        return {"verdicts": [{"id": p["id"], "status": "unverified", "detail": reason} for p in request["proofs"]],
                "deps": {}}


_programs_warm = False


def prepare_request(request: dict[str, Any]) -> None:
    """Before the process for ``request`` is forked: the graph worker's reading
    of the file, and before the first program, torch's first-use cost of an
    optimizer (``torch.optim`` imports ``torch._dynamo``, most of a second):
    paid once here, not by each run of a training script.  No user code."""
    global _programs_warm
    from hooklint.graph.worker import prepare

    prepare(request)
    if request.get("kind") == "program" and not _programs_warm:
        _programs_warm = True
        try:
            import torch._dynamo  # noqa: F401
        except Exception:  # noqa: BLE001 - each run then pays it
            pass


def main(argv: list[str] | None = None) -> int:
    from hooklint.graph.worker import serve_requests, start_worker

    start = start_worker(argv)
    if start.torch is None:
        return 1
    import warnings

    warnings.filterwarnings("ignore")  # torch's FutureWarning on legacy hooks: the proof says more
    from hooklint.graph.worker import warm_up

    warm_up()
    import hooklint.fix.program  # noqa: F401 - once, here, rather than in each run's process

    serve_requests(start, handle_request, prepare_request)
    start.close()
    return 0


__all__ = ["main", "verify_file", "prove"]

if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)
