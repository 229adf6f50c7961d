"""A module's forward ops as an inline SVG picture, for the HTML report.

The picture is drawn from plain data (:class:`ForwardPicture`), so it does not
depend on how the ops were found (torch.fx nodes or autograd nodes from the
graph layer): ops top to bottom in the order the forward ran them, a coloured
band per submodule, and the op a legacy backward hook binds to outlined in
red.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

# Long forwards are cut in the middle; the bound op is always kept.
MAX_OPS = 40
_EDGE = 12  # ops kept at each end of a cut forward

_PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#9d755d", "#72b7b2", "#eeca3b", "#ff9da6")
_BOX_W, _BOX_H, _GAP, _LEFT, _WIDTH = 300, 30, 14, 150, 720


@dataclass(frozen=True)
class PictureOp:
    label: str  # short op name: "addmm", "div"
    module: str  # path of the submodule that ran it ("" for the model itself)
    detail: str = ""  # tooltip: node class, source line


@dataclass(frozen=True)
class ForwardPicture:
    title: str
    ops: tuple[PictureOp, ...]  # in the order the forward ran them
    bound: int | None = None  # index in ``ops`` of the op a legacy hook binds to
    caption: str = ""


def _visible(picture: ForwardPicture) -> list[int | None]:
    """Indices of the ops to draw, None where a run of ops is elided."""
    n = len(picture.ops)
    if n <= MAX_OPS:
        return list(range(n))
    keep = set(range(_EDGE)) | set(range(n - _EDGE, n))
    if picture.bound is not None:
        keep |= {i for i in range(picture.bound - 2, picture.bound + 3) if 0 <= i < n}
    out: list[int | None] = []
    for i in range(n):
        if i in keep:
            out.append(i)
        elif out and out[-1] is not None:
            out.append(None)
    return out


def render_svg(picture: ForwardPicture) -> str:
    rows = _visible(picture)
    modules: dict[str, str] = {}
    for op in picture.ops:
        modules.setdefault(op.module, _PALETTE[len(modules) % len(_PALETTE)])
    height = 20 + len(rows) * (_BOX_H + _GAP)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="forward" width="{_WIDTH}" height="{height}" '
             f'viewBox="0 0 {_WIDTH} {height}" role="img" aria-label="{escape(picture.title)}">',
             f"<title>{escape(picture.title)}</title>"]
    for row, index in enumerate(rows):
        y = 10 + row * (_BOX_H + _GAP)
        if row:
            parts.append(f'<line x1="{_LEFT + _BOX_W // 2}" y1="{y - _GAP}" x2="{_LEFT + _BOX_W // 2}" y2="{y}" '
                         'class="arrow"/>')
        if index is None:
            parts.append(f'<text x="{_LEFT + _BOX_W // 2}" y="{y + 19}" text-anchor="middle" class="elided">'
                         "\u22ef more ops \u22ef</text>")
            continue
        op = picture.ops[index]
        color = modules[op.module]
        bound = index == picture.bound
        module_label = op.module or "(model)"
        parts.append(f'<g class="op{" bound" if bound else ""}" data-index="{index}">'
                     f"<title>{escape(op.detail or op.label)}</title>"
                     f'<rect x="{_LEFT - 12}" y="{y}" width="8" height="{_BOX_H}" fill="{color}"/>'
                     f'<text x="{_LEFT - 18}" y="{y + 19}" text-anchor="end" class="module">'
                     f"{escape(_clip(module_label, 20))}</text>"
                     f'<rect x="{_LEFT}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="5" class="box"/>'
                     f'<text x="{_LEFT + 10}" y="{y + 19}" class="label">{escape(_clip(op.label, 38))}</text>')
        if bound:
            parts.append(f'<text x="{_LEFT + _BOX_W + 10}" y="{y + 19}" class="bound-label">'
                         "\u2190 the legacy hook binds here</text>")
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"
