"""One rank of a launch made by ``hooklint.runtime.distributed_launch``.

PyTorch's launcher starts ``python -m hooklint.runtime.distributed_rank ARGS`` on
every rank (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``... set as for any
program it launches).  Two modes (``HOOKLINT_DIST_MODE``):

- ``run``: ARGS is ``SCRIPT [ARGS...]`` or ``-m MODULE [ARGS...]``; the program
  runs as ``__main__`` under a session, exactly as ``hooklint run`` runs it,
  and this rank exits with the program's status.
- ``check``: the job of ``hooklint.testing.assert_hooks_ok_distributed``,
  described in ``spec.pkl`` of the launch's folder.

Either way the rank writes its observations to ``rank<RANK>.pkl``.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback

from hooklint.runtime.distributed_launch import (
    CODES_VAR,
    DIR_VAR,
    MODE_VAR,
    RankResult,
    set_parent_death_signal,
    write_result,
)


def main() -> int:
    set_parent_death_signal()  # the launcher gone (killed), this rank goes too
    if os.getppid() == 1:
        return 1  # the launcher died before we could ask
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    codes = frozenset(c for c in os.environ.get(CODES_VAR, "").split(",") if c)
    if os.environ.get(MODE_VAR) == "check":
        return _check(rank, world_size, codes)
    return _run(rank, world_size, codes, sys.argv[1:])


def _run(rank: int, world_size: int, codes: frozenset[str], argv: list[str]) -> int:
    from hooklint.runtime.script import run_main
    from hooklint.runtime.session import Session

    if argv and argv[0] == "-m":
        script, module, args = None, argv[1], argv[2:]
    else:
        script, module, args = argv[0], None, argv[1:]
    session = Session(codes=codes, all_threads=True)
    session.start()
    try:
        outcome = run_main(script, module, args)
        if outcome.exception is not None:
            session.observe_exception(outcome.exception)
    finally:
        session.stop()
    write_result(RankResult(rank, world_size, outcome.exit_code, session.observations, session.notices))
    return outcome.exit_code


def _check(rank: int, world_size: int, codes: frozenset[str]) -> int:
    from hooklint.runtime.session import Session

    with open(os.path.join(os.environ[DIR_VAR], "spec.pkl"), "rb") as f:
        raw = f.read()
    session: Session | None = None
    error = ""
    exit_code = 0
    try:
        spec = pickle.loads(raw)  # the caller's sys.path first: build_model may live in its test folder
    except Exception:  # noqa: BLE001
        spec = None
        error = traceback.format_exc()
        exit_code = 1
    if spec is not None:
        for entry in reversed(spec["sys_path"]):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        session = Session(codes=codes, all_threads=True)
        try:
            _exercise(spec, rank, world_size, session)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
            from hooklint.runtime.frames import drop_hooklint_frames

            if session.active:
                session.observe_exception(exc)
            drop_hooklint_frames(exc)
            error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            exit_code = 1
        finally:
            session.stop()
    observations = session.observations if session is not None else []
    notices = session.notices if session is not None else []
    write_result(RankResult(rank, world_size, exit_code, observations, notices, error))
    return exit_code


def _exercise(spec: dict, rank: int, world_size: int, session) -> None:
    import torch
    import torch.distributed as dist

    from hooklint.testing import _default_loss, _resolve_callable

    dist.init_process_group(spec["backend"])
    try:
        if spec["backend"] == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        build_model = _resolve_callable(spec["build_model"], "build_model")
        loss_fn = _resolve_callable(spec["loss_fn"], "loss_fn") if spec["loss_fn"] is not None else None
        session.start()
        torch.manual_seed(spec["seed"])  # the same initial weights on every rank, as DDP and FSDP expect
        model = build_model()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"build_model must return an nn.Module, not {type(model).__name__}")
        if spec["backend"] == "nccl":
            model = model.cuda()
        session.watch(model)
        wrapped = _wrap(model, spec["wrap"])
        inputs = _inputs_of_rank(spec["example_inputs"], rank, world_size, spec["backend"] == "nccl")
        _train_steps(model, wrapped, inputs, loss_fn, spec["steps"], _default_loss)
    finally:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the rank's own error, if any, is what matters
            pass


# The steps run in code of their own: hooklint observes backward passes started from the
# user's code, not its own, and findings name this place ("after the backward at
# <assert_hooks_ok_distributed>:6") and the model as `model`.
_STEPS_SOURCE = """\
def train_steps(model, wrapped, inputs, loss_fn, steps, default_loss):
    for _ in range(steps):
        output = wrapped(*inputs)
        loss = loss_fn(output) if loss_fn is not None else default_loss(output)
        check_loss(loss)
        loss.backward()
"""


def _check_loss(loss) -> None:
    import torch

    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise TypeError("loss_fn must return a scalar tensor")


_steps_namespace: dict = {"check_loss": _check_loss}
exec(compile(_STEPS_SOURCE, "<assert_hooks_ok_distributed>", "exec"), _steps_namespace)  # noqa: S102 - our own code
_train_steps = _steps_namespace["train_steps"]


def _wrap(model, wrap: str | None):
    if wrap is None:
        return model
    if wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard

    # as FSDP2's examples do: every direct child that holds parameters, then the root
    for child in model.children():
        if any(True for _ in child.parameters()):
            fully_shard(child)
    fully_shard(model)
    return model


def _inputs_of_rank(inputs: tuple, rank: int, world_size: int, cuda: bool) -> tuple:
    """This rank's part of the batch (dim 0, as a DistributedSampler gives each rank
    its own samples) when every tensor input has at least one row per rank; else
    every rank gets the whole inputs."""
    import torch

    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    split = bool(tensors) and all(t.dim() > 0 and t.shape[0] >= world_size for t in tensors)
    out = []
    for item in inputs:
        if isinstance(item, torch.Tensor):
            if split:
                item = item.tensor_split(world_size)[rank]
            if cuda:
                item = item.cuda()
        out.append(item)
    return tuple(out)


if __name__ == "__main__":
    sys.exit(main())
