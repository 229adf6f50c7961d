"""HKL601, HKL602, HKL603 (and HKL203's collective case): from what the
distributed extension (hooklint.runtime.distributed) saw to observations.

Every message names the hook, its target, what happened and why that is wrong
under the engine; ``expected``/``observed`` are what the assertion helpers print.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hooklint.runtime.frames import Site
from hooklint.runtime.observation import Observation
from hooklint.static.distributed import ENGINE_HELP
from hooklint.static.hooks import HookKind

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.runtime.distributed import DdpWrite, Managed, PendingFsdpHook, ShardedRead


def hooks_text(hooks: list[tuple[str, Site, str]]) -> str:
    if not hooks:
        return "no hook of the program touched it"
    parts = [f"{what} ({site}{': ' + how if how else ''})" for what, site, how in hooks[:4]]
    if len(hooks) > 4:
        parts.append(f"{len(hooks) - 4} more")
    return "hooks that touched it: " + ", ".join(parts)


def diverged(name: str, shape: str, values: list[tuple], hooks: list, backward_site: Site,
              hand_synced: bool) -> Observation:
    per_rank = "; ".join(f"rank {rank}: sum {v[2]:.6g}, norm {v[3] ** 0.5:.6g}" for rank, v in enumerate(values))
    if hand_synced:
        why = ("its hooks call a torch.distributed collective during backward to synchronise it, yet the ranks "
               "end with different gradients")
        help_text = ("Synchronise the gradient, not the parameter: in a post-accumulate-grad hook, "
                     "`dist.all_reduce(param.grad); param.grad /= world_size` (or wrap the model in "
                     "DistributedDataParallel, which does it).")
    else:
        why = "DDP all-reduces it during this backward, yet the ranks end with different gradients"
        help_text = ("Find what changes the gradient after DDP's all-reduce, or on one rank only: a hook that edits "
                     "`.grad` differently per rank, a module used outside the DDP wrapper; edit gradients with "
                     "`param.register_hook` or a post-accumulate-grad hook, which run before the all-reduce.")
    with_hooks = [h for h in hooks if h[2]] or hooks
    site = with_hooks[0][1] if len(with_hooks) == 1 or len({h[1] for h in with_hooks}) == 1 else backward_site
    related = [backward_site.related("the backward after which the gradients differ")] if site != backward_site \
        else []
    related += [s.related(f"{what} touched it") for what, s, _how in hooks if s != site][:4]
    return Observation(
        code="HKL601",
        key=("HKL601", site, backward_site),
        site=site,
        message=f"after the backward at {backward_site}, before the optimizer step, the gradient of `{name}` "
        f"(shape {shape}) differs across ranks ({per_rank}): {why}; {hooks_text(hooks)}; "
        f"the optimizer step that follows moves each replica differently",
        help=help_text,
        expected=f"the gradient of `{name}` is the same on every rank after backward",
        observed=f"different gradients ({per_rank})",
        related=tuple(related),
        subject=f"`{name}`",
        subject_noun="parameter",
    )


def collective_on_parameter(rec, collective: str) -> Observation:
    target = rec.target_text()
    return Observation(
        code="HKL203",
        key=("HKL203", rec.site, rec.name, "collective"),
        site=rec.site,
        message=f"{rec.what()} called `dist.{collective}` on its argument, the parameter {target} itself: the "
        f"argument of a post-accumulate-grad hook is the parameter, not its gradient, so the weights were combined "
        f"across ranks and `.grad` stayed local",
        help=f"Call it on the gradient: `dist.{collective}(param.grad)` (then divide by the world size for a "
        "mean), and return nothing.",
        expected="the hook reduces `param.grad`",
        observed=f"`dist.{collective}` on the parameter",
        subject=target,
        subject_noun=rec.subject_noun,
    )


def ddp_write(write: DdpWrite, lost: bool, backward_site: Site) -> Observation:
    rec = write.rec
    outcome = ("the edit was lost: after backward `.grad` holds DDP's all-reduced gradient, without the edit" if lost
               else "this time the edit is still there after backward, by the order in which the bucket was "
                    "reduced, not by design")
    return Observation(
        code="HKL602",
        key=("HKL602", rec.site, rec.name, "ddp-write", lost),
        site=rec.site,
        message=f"{rec.what()} on {write.module_text} wrote `.grad` of {write.param_text}, a parameter "
        f"DistributedDataParallel manages, after its gradient was accumulated: DDP had already copied that "
        f"gradient into its bucket for the all-reduce and writes the reduced bucket back into `.grad` at the end "
        f"of backward; {outcome}",
        help="Edit the gradient before DDP reads it: `param.register_hook(lambda g: ...)` (returns the new "
        "gradient) or `param.register_post_accumulate_grad_hook(fn)` (edits `param.grad` in place); both run "
        "before the all-reduce, so the edit is averaged like the gradient.",
        expected=f"what the hook writes into `.grad` of {write.param_text} is what it holds after backward",
        observed="the hook wrote `.grad` after DDP had taken the gradient for its all-reduce"
        + ("; the edit was lost" if lost else ""),
        related=(write.site.related("`.grad` written here"), backward_site.related("the backward")),
        subject=write.param_text,
        subject_noun="parameter",
    )


def local_gradient_update(rec, managed: Managed) -> Observation:
    target = rec.target_text()
    return Observation(
        code="HKL602",
        key=("HKL602", rec.site, rec.name, "ddp-update"),
        site=rec.site,
        message=f"{rec.what()} on {target}, a parameter DistributedDataParallel manages, read `.grad` and changed "
        f"the parameter: the hook runs inside AccumulateGrad, before DDP all-reduces that gradient, so it "
        f"updated the weights from this rank's local gradient and the replicas drift apart",
        help="Under DDP, step the optimizer after `backward()` (the all-reduce has finished then), or run the update "
        "from a DDP communication hook (`ddp.register_comm_hook`) after the all-reduce.",
        expected="parameters updated from the all-reduced gradient, the same on every rank",
        observed="the hook updated the parameter from the local gradient, before the all-reduce",
        subject=target,
        subject_noun="parameter",
    )


def sharded_read(read: ShardedRead, failed: bool) -> Observation:
    rec = read.rec
    saw = "None" if read.was_none else "the previous step's sharded gradient (a DTensor), not this backward's"
    after = ("; the backward then failed" if failed else
             "; FSDP wrote this backward's gradient into it only after the hook ran")
    return Observation(
        code="HKL602",
        key=("HKL602", rec.site, rec.name, "fsdp-read"),
        site=rec.site,
        message=f"{rec.what()} on {read.module_text} read `.grad` of {read.param_text} while FSDP2 held it "
        f"sharded: the hook ran before FSDP gathered the module's parameters for its backward, and `.grad` was "
        f"{saw}{after}",
        help=ENGINE_HELP["HKL201"]["fsdp2"],
        expected=f"`.grad` of {read.param_text} holds this backward's gradient when the hook reads it",
        observed=f"`.grad` was {saw}",
        related=(read.site.related("`.grad` read here"),),
        subject=read.param_text,
        subject_noun="parameter",
    )


def fsdp_hook_never_runs(item: PendingFsdpHook, fsdp_param, backward_site: Site) -> Observation:
    rec = item.rec
    target = rec.target_text()
    if item.before:
        when = ("was registered before `fully_shard`, which replaced the parameter by a sharded DTensor "
                "parameter: the hook stays on the old tensor, which no backward reaches")
    else:
        when = ("is registered on the sharded DTensor parameter FSDP2 keeps between steps; gradients flow to the "
                "unsharded parameter FSDP gathers for each forward and are reduce-scattered into `.grad`, never "
                "through the sharded one")
    related = [backward_site.related("the backward that computed the gradient without running the hook")]
    if item.shard_site is not None:
        related.insert(0, item.shard_site.related("`fully_shard` replaced the parameter here"))
    kind = "post-accumulate-grad hook" if rec.kind is HookKind.POST_ACCUMULATE else "tensor hook"
    return Observation(
        code="HKL603",
        key=("HKL603", rec.site, rec.name, item.before),
        site=rec.site,
        message=f"{rec.what()} on {target} {when}; FSDP computed that parameter's gradient in the backward at "
        f"{backward_site} and the {kind} did not run",
        help="Register `param.register_post_accumulate_grad_hook(fn)` on the sharded parameter, after `fully_shard` "
        "(`for p in model.parameters(): ...`): it runs once `param.grad` holds this rank's shard of the reduced "
        "gradient, a DTensor (edit `param.grad.to_local()`, or multiply by a mask distributed the same way).",
        expected="the hook runs in every backward that computes the parameter's gradient",
        observed=f"the {kind} did not run",
        related=tuple(related),
        subject=target,
        subject_noun="parameter",
    )
