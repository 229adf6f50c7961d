"""Recomputation inside a custom autograd Function's backward.

Activation checkpointing (``torch.utils.checkpoint``, GPipe's ``Recompute``,
the ``CheckpointFunction`` of many diffusion code bases) keeps only the
inputs of a block in ``forward`` and, in ``backward``, runs the block again
under ``torch.enable_grad()`` to rebuild its graph.  The callable it runs is
an argument of ``forward`` kept on ``ctx`` (``ctx.run_function =
run_function``).  This module finds those re-runs, and whether the file
touches the random number generator state at all (torch's own checkpoint
saves it in forward and restores it around the re-run, through
``torch.random.fork_rng`` and ``set_rng_state``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.context import FileContext
from hooklint.static.flow import executed_nodes
from hooklint.static.semantic import ClassInfo, is_staticmethod, positional_params

# Names whose presence shows the file saves, restores or seeds a generator.
RNG_STATE_NAMES = frozenset({
    "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all", "fork_rng",
    "manual_seed", "manual_seed_all", "seed", "preserve_rng_state", "graphsafe_get_state",
    "graphsafe_set_state", "get_state", "set_state", "clone_state",
})


@dataclass
class Recomputation:
    """``backward`` of ``function_class`` calls ``ctx.<stored>`` (the
    ``source`` argument of ``forward``) under ``torch.enable_grad()``."""

    function_class: ClassInfo
    backward: ast.AST
    call: ast.Call
    stored: str
    source: str


def recomputations(ctx: FileContext) -> list[Recomputation]:
    model = ctx.model
    out: list[Recomputation] = []
    for info in model.classes.values():
        if not model.is_autograd_function_class(info):
            continue
        forward, backward = info.method("forward"), info.method("backward")
        if forward is None or backward is None or not is_staticmethod(forward) or not is_staticmethod(backward):
            continue
        stored = _callables_kept(forward)
        back_params = positional_params(backward)
        if not stored or not back_params:
            continue
        out += _reruns(info, backward, back_params[0], stored)
    return out


def touches_rng_state(ctx: FileContext) -> bool:
    """Does the file name any API that saves, restores or seeds a random
    number generator (or torch checkpoint's ``preserve_rng_state``)?"""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Attribute) and node.attr in RNG_STATE_NAMES:
            return True
        if isinstance(node, ast.Name) and node.id in RNG_STATE_NAMES:
            return True
        if isinstance(node, ast.alias) and node.name.rpartition(".")[2] in RNG_STATE_NAMES:
            return True
        if isinstance(node, ast.keyword) and node.arg in RNG_STATE_NAMES:
            return True
    return False


def _callables_kept(forward: ast.AST) -> dict[str, str]:
    """``ctx.<attr> = <param>`` in ``forward``: attr -> the forward parameter."""
    params = positional_params(forward)
    if not params:
        return {}
    ctx_name, inputs = params[0], set(params[1:])
    kept: dict[str, str] = {}
    for node in executed_nodes(forward):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Name) or node.value.id not in inputs:
            continue
        for target in node.targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == ctx_name:
                kept[target.attr] = node.value.id
    return kept


def _reruns(info: ClassInfo, backward: ast.AST, ctx_name: str, stored: dict[str, str]) -> list[Recomputation]:
    aliases: dict[str, str] = {}  # `fn = ctx.run_function`
    for node in executed_nodes(backward):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and _kept_attr(node.value, ctx_name, stored) is not None:
            aliases[node.targets[0].id] = _kept_attr(node.value, ctx_name, stored)  # type: ignore[assignment]
    out: list[Recomputation] = []
    for node in executed_nodes(backward):
        if not isinstance(node, (ast.With, ast.AsyncWith)) or not any(_enables_grad(i.context_expr) for i in node.items):
            continue
        for stmt in node.body:
            for sub in ast.walk(stmt):
                if not isinstance(sub, ast.Call):
                    continue
                attr = _kept_attr(sub.func, ctx_name, stored)
                if attr is None and isinstance(sub.func, ast.Name):
                    attr = aliases.get(sub.func.id)
                if attr is not None:
                    out.append(Recomputation(info, backward, sub, attr, stored[attr]))
    return out


def _kept_attr(expr: ast.AST, ctx_name: str, stored: dict[str, str]) -> str | None:
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == ctx_name \
            and expr.attr in stored:
        return expr.attr
    return None


def _enables_grad(expr: ast.AST) -> bool:
    """``torch.enable_grad()``, ``enable_grad()``, ``torch.set_grad_enabled(True)``."""
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name == "enable_grad":
        return True
    return name == "set_grad_enabled" and len(expr.args) == 1 and isinstance(expr.args[0], ast.Constant) \
        and expr.args[0].value is True
