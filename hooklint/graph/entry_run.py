"""Running an entry construction's slice (worker only: imports torch).

:mod:`hooklint.graph.entry` plans, statically, the statements a script's
model construction needs.  Here they run in the file's namespace (its
definitions already executed), as one worker step, with:

* ``parse_args``/``parse_known_args`` of every ``argparse`` parser answering
  its defaults (a required option gets its first choice, else None), plus
  the option a variant sets; nothing on the worker's command line is read;
* ``eval(text)`` (rewritten to :data:`~hooklint.graph.entry.EVAL_HELPER`)
  accepting only a dotted name, or a call of one with literal arguments,
  weight-loading keywords turned off (``eval("hubconf.{}(pretrained=True)"
  .format(args.arch))`` builds ``hubconf.resnet18(pretrained=False)``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
from typing import Any, Iterator

from torch import nn

from hooklint.graph.entry import EVAL_HELPER, WEIGHT_KEYWORDS, EntryConstruction


class EvalRefused(ValueError):
    """``eval`` of something that is not a name or a plain call."""


def _plain(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _plain(node.value)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_plain(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, ast.Call):
        return _plain(node.func) and not isinstance(node.func, ast.Call) and all(
            _plain(a) for a in node.args) and all(k.arg is not None and _plain(k.value) for k in node.keywords)
    return False


def safe_eval(text: Any, namespace: dict[str, Any]) -> Any:
    """What ``eval(text)`` gives in the script, for a dotted name or a plain call."""
    if not isinstance(text, str):
        raise EvalRefused(f"hooklint evaluates only strings here, not {type(text).__name__}")
    tree = ast.parse(text.strip(), mode="eval")
    if not _plain(tree.body):
        raise EvalRefused(f"hooklint does not evaluate `{text}` (only a name or a call of one)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg in WEIGHT_KEYWORDS:
                    keyword.value = ast.copy_location(ast.Constant(WEIGHT_KEYWORDS[keyword.arg]), keyword.value)
    return eval(compile(tree, "<eval>", "eval"), namespace)  # noqa: S307 - a name or a plain call, checked above


@contextlib.contextmanager
def parser_defaults(overrides: dict[str, Any]) -> Iterator[None]:
    """Every argparse parser answers its defaults (and ``overrides``)."""
    original_known = argparse.ArgumentParser.parse_known_args
    original_args = argparse.ArgumentParser.parse_args

    def parse_known_args(self, args=None, namespace=None):  # noqa: ARG001 - the command line is never read
        result = namespace if namespace is not None else argparse.Namespace()
        for action in self._actions:
            if action.dest in (argparse.SUPPRESS, "help") or hasattr(result, action.dest):
                continue
            if action.dest in overrides:
                value = overrides[action.dest]
            else:
                value = action.default
                if value is None and action.required and action.choices:
                    value = next(iter(action.choices))
            if isinstance(value, str) and action.type is not None and action.type is not str:
                try:
                    value = self._get_value(action, value)
                except (argparse.ArgumentError, TypeError, ValueError):
                    pass
            setattr(result, action.dest, value)
        return result, []

    def parse_args(self, args=None, namespace=None):
        return parse_known_args(self, args, namespace)[0]

    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]
    argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_known_args = original_known  # type: ignore[method-assign]
        argparse.ArgumentParser.parse_args = original_args  # type: ignore[method-assign]


class NoWeights(dict):
    """What a weight download returns while an entry builds its model: nothing.
    ``load_state_dict`` of it loads nothing (random weights: the ops are the same)."""


@contextlib.contextmanager
def weights_not_downloaded(skipped: list[str]) -> Iterator[None]:
    """``models.alexnet(pretrained=True)`` inside a project helper: the download
    (``torch.hub.load_state_dict_from_url``, wherever a library imported it) gives
    :class:`NoWeights`, and the URL is recorded in ``skipped``."""
    import sys

    import torch.hub

    original = torch.hub.load_state_dict_from_url

    def no_download(url, *args, **kwargs):  # noqa: ARG001
        skipped.append(str(url))
        return NoWeights()

    patched: list[tuple[Any, str]] = []
    for module in list(sys.modules.values()):
        for attr in ("load_state_dict_from_url", "load_url"):
            try:
                if getattr(module, attr, None) is original:
                    setattr(module, attr, no_download)
                    patched.append((module, attr))
            except Exception:  # noqa: BLE001 - an odd module object: leave it
                continue
    original_load = nn.Module.load_state_dict

    def load_state_dict(self, state_dict, *args, **kwargs):
        if isinstance(state_dict, NoWeights):
            from torch.nn.modules.module import _IncompatibleKeys

            return _IncompatibleKeys([], [])
        return original_load(self, state_dict, *args, **kwargs)

    nn.Module.load_state_dict = load_state_dict  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.load_state_dict = original_load  # type: ignore[method-assign]
        for module, attr in patched:
            setattr(module, attr, original)


def run_entry(namespace: dict[str, Any], entry: EntryConstruction, filename: str,
              variant: tuple[tuple[tuple[str, Any], ...], str] | None = None) -> nn.Module:
    """The model the entry's slice binds (the module inside a DataParallel);
    ``variant``: options set as a documented command or another choice sets them."""
    namespace[EVAL_HELPER] = lambda text: safe_eval(text, namespace)
    overrides = dict(variant[0]) if variant is not None else {}
    skipped: list[str] = []
    try:
        with parser_defaults(overrides), weights_not_downloaded(skipped):
            exec(compile(entry.program, filename, "exec"), namespace)  # noqa: S102 - the planned slice only
        value = namespace.get(entry.binding)
    finally:
        namespace.pop(EVAL_HELPER, None)
    while isinstance(value, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        value = value.module
    if not isinstance(value, nn.Module):
        raise TypeError(f"`{entry.binding}` is a {type(value).__name__}, not a module")
    SKIPPED_WEIGHTS[:] = skipped
    return value


# the weight downloads the last run_entry skipped (for the model's description)
SKIPPED_WEIGHTS: list[str] = []
