"""Example inputs from what the model and the project declare (worker only).

Before guessing from the first layer, the graph layer asks:

1. the model's own declared sizes: timm's ``default_cfg``/``pretrained_cfg``
   ``input_size``; ``img_size``/``image_size``/``input_size``/``resolution``
   with ``in_chans``/``in_channels``/``num_channels`` on the model or its
   ``patch_embed``; a Hugging Face style ``config.image_size`` and
   ``config.num_channels`` (a vision transformer fails its patch embedding's
   size check on any other size);
2. the size the project's data code feeds (:func:`hooklint.graph.entry.data_hint`:
   ``RandomCrop(32)``, ``Resize(224)``, a CIFAR or MNIST dataset), with the
   channels of the first convolution when the data code does not say them.

Each candidate says where it came from; the first the forward accepts is used.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

INPUT_HINT = "_hooklint_input_hint"  # attribute the build step sets on a model: ((C, H, W) or (H, W), why)

_SIZE_ATTRIBUTES = ("img_size", "image_size", "input_size", "in_size", "resolution", "input_resolution")
_CHANNEL_ATTRIBUTES = ("in_chans", "in_channels", "num_channels", "input_channels", "n_channels", "in_ch")


def _spatial(value: Any) -> tuple[int, int] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 8 <= value <= 2048:
        return value, value
    if isinstance(value, (tuple, list)) and len(value) in (2, 3) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        h, w = value[-2], value[-1]
        if 8 <= h <= 2048 and 8 <= w <= 2048:
            return h, w
    return None


def _channels(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 64 else None


class _Conv:
    """The first 2-D convolution: a torch layer, or a user layer holding a 4-D
    weight (quantized or pruned wrappers call ``F.conv2d`` themselves)."""

    def __init__(self, in_channels: int) -> None:
        self.in_channels = in_channels


def _first_conv(model: nn.Module) -> tuple[str, Any] | None:
    for path, module in model.named_modules():
        if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
            return path, module
        weight = module._parameters.get("weight")
        if not type(module).__module__.startswith("torch.") and isinstance(weight, torch.Tensor) \
                and weight.dim() == 4:
            return f"{path} (weight {list(weight.shape)})", _Conv(int(weight.shape[1]))
    return None


def declared_candidates(model: nn.Module) -> list[tuple[tuple[int, ...], str]]:
    """(C, H, W) image sizes the model declares, each with where it was read."""
    out: list[tuple[tuple[int, ...], str]] = []
    for attr in ("pretrained_cfg", "default_cfg"):
        cfg = getattr(model, attr, None)
        size = cfg.get("input_size") if isinstance(cfg, dict) else None
        if isinstance(size, (tuple, list)) and len(size) == 3 and _spatial(size) and _channels(size[0]):
            out.append((tuple(size), f"the model's {attr}['input_size']={tuple(size)}"))
    holders: list[tuple[str, Any]] = [("the model", model)]
    embed = getattr(model, "patch_embed", None)
    if isinstance(embed, nn.Module):
        holders.append(("its patch_embed", embed))
    config = getattr(model, "config", None)
    if config is not None and not isinstance(config, (nn.Module, torch.Tensor)):
        holders.append(("its config", config))
    first = _first_conv(model)
    for where, holder in holders:
        for size_attr in _SIZE_ATTRIBUTES:
            value = getattr(holder, size_attr, None)
            spatial = _spatial(value)
            if spatial is None:
                continue
            if size_attr == "input_size" and isinstance(value, int) and first is None and where != "its config":
                continue  # an RNN's input_size is its features, not an image side
            channels, how = None, ""
            if isinstance(value, (tuple, list)) and len(value) == 3 and _channels(value[0]):
                channels, how = value[0], ""
            for channel_attr in _CHANNEL_ATTRIBUTES:
                found = _channels(getattr(holder, channel_attr, None))
                if channels is None and found is not None:
                    channels, how = found, f", {channel_attr}={found}"
            if channels is None:
                proj = getattr(holder, "proj", None)
                if isinstance(proj, nn.Conv2d):
                    channels, how = proj.in_channels, f", proj.in_channels={proj.in_channels}"
                elif first is not None:
                    channels, how = first[1].in_channels, f", {first[0]}.in_channels={first[1].in_channels}"
            if channels is None:
                continue
            shape = (channels, *spatial)
            text = f"{where}'s {size_attr}={value!r}{how}"
            if all(shape != s for s, _ in out):
                out.append((shape, text))
    return out


def hinted_candidates(model: nn.Module) -> list[tuple[tuple[int, ...], str]]:
    """The size the project's data code feeds, with the first convolution's
    channels when it does not say them."""
    hint = model.__dict__.get(INPUT_HINT)
    if not hint:
        return []
    shape, why = hint
    first = _first_conv(model)
    if len(shape) == 3:
        channels = shape[0]
        if first is not None and first[1].in_channels != channels:
            channels = first[1].in_channels
            why += f" (channels from {first[0]}.in_channels={channels})"
        return [((channels, *shape[1:]), f"the data code: {why}")]
    if first is None:
        return []
    return [((first[1].in_channels, *shape), f"the data code: {why}, channels from {first[0]}.in_channels="
                                              f"{first[1].in_channels}")]


def conv_candidates(model: nn.Module) -> list[tuple[tuple[int, ...], str]]:
    """A user layer with a 4-D weight first (no ``nn.Conv2d`` to read): images of
    the usual sides, with its input channels."""
    first = _first_conv(model)
    if first is None or isinstance(first[1], nn.Module):
        return []  # torch's own convolutions are handled with the other first layers
    channels = first[1].in_channels
    return [((channels, side, side), f"{first[0]}, in_channels={channels}") for side in (32, 224)]


def image_candidates(model: nn.Module) -> list[tuple[Callable[[], tuple[Any, ...]], str]]:
    """Example input tuples (each made when called), declared sizes first, then the data code's."""
    out = []
    seen = set()
    for shape, why in declared_candidates(model) + hinted_candidates(model) + conv_candidates(model):
        if shape in seen:
            continue
        seen.add(shape)
        out.append((_images(shape), f"derived from {why}"))
    return out


def _images(shape: tuple[int, ...]) -> Callable[[], tuple[Any, ...]]:
    return lambda: (torch.randn((2, *shape)),)
