"""``hooklint report``: one self-contained HTML file.

Everything is inline (CSS, a few lines of JavaScript, SVG pictures); a
Content-Security-Policy in the page forbids loading anything else, so the
report makes no network request when opened.  Everything that comes from the
checked files (paths, code, messages) is escaped.

The page has a summary by rule and by file, then every finding with its code
frame, help, fix (as a diff), the rule's documentation, and, where the graph
layer analysed the hooked module, a picture of its forward ops
(:mod:`hooklint.report.svg`).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from html import escape
from typing import Mapping, Sequence

from hooklint import __version__
from hooklint.findings import Applicability, Finding, NoticeLevel, Report, Severity
from hooklint.fix.apply import preview
from hooklint.fix.files import split_lines, unified_diff
from hooklint.report import RuleInfo, SourceLoader, frame_text
from hooklint.report.paths import place
from hooklint.report.svg import ForwardPicture, render_svg

CONTEXT_LINES = 2

_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

_CSS = """
:root { --err: #c62828; --warn: #b26a00; --info: #1565c0; --muted: #5f6b7a; --line: #dde3ea; }
* { box-sizing: border-box; }
body { font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1d2733;
       background: #f6f8fa; }
header { background: #1d2733; color: #fff; padding: 16px 32px; }
header h1 { margin: 0; font-size: 20px; }
header p { margin: 4px 0 0; color: #c5d0dc; }
main { padding: 16px 32px 48px; max-width: 1200px; }
h2 { font-size: 17px; margin: 28px 0 8px; }
h3.file { font-size: 15px; margin: 24px 0 8px; font-family: ui-monospace, Menlo, Consolas, monospace; }
table { border-collapse: collapse; background: #fff; border: 1px solid var(--line); }
th, td { padding: 4px 12px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: #eef2f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 13px; }
.finding { background: #fff; border: 1px solid var(--line); border-left: 4px solid var(--warn); border-radius: 4px;
           margin: 10px 0; padding: 10px 14px; }
.finding.error { border-left-color: var(--err); }
.finding.info { border-left-color: var(--info); }
.finding .head { font-weight: 600; }
.badge { display: inline-block; padding: 0 6px; border-radius: 3px; color: #fff; background: var(--warn);
         font-size: 12px; margin-right: 6px; }
.error .badge, .badge.error { background: var(--err); }
.info .badge, .badge.info { background: var(--info); }
.badge.warning { background: var(--warn); }
.loc { color: var(--muted); font-weight: normal; }
.frame { background: #fbfcfd; border: 1px solid var(--line); padding: 6px 0; overflow-x: auto; margin: 8px 0;
         tab-size: 4; }
.frame .ln { display: inline-block; width: 4.5em; padding-right: 10px; text-align: right; color: var(--muted);
             user-select: none; }
.frame .hit { background: #fff4e0; display: block; }
.frame mark { background: #ffd7a8; border-bottom: 2px solid var(--err); color: inherit; }
.diff { background: #fbfcfd; border: 1px solid var(--line); padding: 6px 10px; overflow-x: auto; }
.diff .add { color: #1b5e20; background: #e8f5e9; display: block; }
.diff .del { color: #b71c1c; background: #ffebee; display: block; }
.note { color: var(--muted); }
details { margin: 6px 0; }
summary { cursor: pointer; color: #2d5d8a; }
.docs { border-left: 3px solid var(--line); padding: 0 12px; }
.docs pre { background: #f3f5f7; padding: 8px; overflow-x: auto; }
svg.forward { background: #fff; border: 1px solid var(--line); margin: 6px 0; max-width: 100%; height: auto; }
svg .box { fill: #f3f6f9; stroke: #9aa8b6; }
svg .bound .box { fill: #ffebee; stroke: #c62828; stroke-width: 3; }
svg .label { font: 13px ui-monospace, Menlo, Consolas, monospace; fill: #1d2733; }
svg .module { font: 12px system-ui, sans-serif; fill: #5f6b7a; }
svg .bound-label { font: 600 13px system-ui, sans-serif; fill: #c62828; }
svg .arrow { stroke: #9aa8b6; stroke-width: 2; }
svg .elided { font: 13px system-ui, sans-serif; fill: #5f6b7a; }
.controls { margin: 12px 0; }
.controls input[type=search] { padding: 4px 8px; width: 320px; }
.hidden { display: none; }
"""

# Filters findings by text and severity; marks the page ready (the browser test checks it).
_JS = """
(function () {
  var search = document.getElementById('filter');
  var boxes = document.querySelectorAll('.controls input[type=checkbox]');
  var cards = document.querySelectorAll('.finding');
  var shown = document.getElementById('shown');
  function apply() {
    var q = search.value.toLowerCase();
    var allowed = {};
    boxes.forEach(function (b) { allowed[b.value] = b.checked; });
    var n = 0;
    cards.forEach(function (c) {
      var ok = allowed[c.dataset.severity] && c.textContent.toLowerCase().indexOf(q) >= 0;
      c.classList.toggle('hidden', !ok);
      if (ok) { n += 1; }
    });
    shown.textContent = String(n);
  }
  search.addEventListener('input', apply);
  boxes.forEach(function (b) { b.addEventListener('change', apply); });
  apply();
  document.body.dataset.ready = '1';
})();
"""


def _anchor(text: str) -> str:
    return "f-" + re.sub(r"[^A-Za-z0-9_-]", "-", text)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def render_html(report: Report, *, sources: SourceLoader, catalog: Mapping[str, RuleInfo],
                pictures: Mapping[Finding, Sequence[ForwardPicture]] | None = None,
                title: str = "hooklint report") -> str:
    pictures = pictures or {}
    findings = report.sorted_findings()
    by_file: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        by_file[f.path].append(f)
    body = [
        f"<header><h1>{escape(title)}</h1><p>hooklint {escape(__version__)} \u00b7 "
        f"{_plural(report.files_checked, 'file')} checked \u00b7 {_plural(len(findings), 'finding')} in "
        f"{_plural(len(by_file), 'file')}"
        + (f" \u00b7 {report.fixed} fixed" if report.fixed else "") + "</p></header><main>",
    ]
    if findings:
        body += _summary_by_rule(findings, catalog) + _summary_by_file(by_file)
        body.append('<h2>Findings</h2><div class="controls"><input type="search" id="filter" '
                    'placeholder="Filter by text, code, file\u2026" aria-label="filter"> '
                    + "".join(f'<label><input type="checkbox" value="{s.value}" checked> {s.value}</label> '
                              for s in Severity)
                    + ' \u00b7 <span id="shown"></span> shown</div>')
        for path, items in by_file.items():
            body.append(f'<h3 class="file" id="{_anchor(path)}">{escape(path)}</h3>')
            body += [_finding_html(f, frame_text(sources, f.path, f.cell), catalog.get(f.code), pictures.get(f, ()))
                     for f in items]
    else:
        errors = report.count_notices(NoticeLevel.ERROR)
        verdict = "All checks passed." if not errors else (
            f"No findings, but the results are incomplete: {_plural(errors, 'error')} in the analysis "
            "(see the notices below).")
        body.append(f'<h2>No findings</h2><p>{verdict}</p><div class="controls hidden">'
                    '<input type="search" id="filter"><span id="shown"></span></div>')
    body += _notices(report)
    body.append("</main>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(body) + f"<script>{_JS}</script></body></html>\n"
    )


def _summary_by_rule(findings: list[Finding], catalog: Mapping[str, RuleInfo]) -> list[str]:
    counts = Counter(f.code for f in findings)
    first = {}
    for f in findings:
        first.setdefault(f.code, f)
    fixable = Counter(f.code for f in findings if f.fix and f.fix.applicability is not Applicability.DISPLAY_ONLY)
    rows = []
    for code in sorted(counts):
        f = first[code]
        info = catalog.get(code)
        summary = info.summary if info else ""
        url = (info.url if info else "") or f.url
        link = f'<a href="{escape(url)}">{escape(code)}</a>' if url else escape(code)
        rows.append(f"<tr><td>{link}</td><td>{escape(f.name)}</td>"
                    f'<td><span class="badge {f.severity.value}">{f.severity.value}</span></td>'
                    f"<td>{escape(summary)}</td><td class=\"num\">{counts[code]}</td>"
                    f"<td class=\"num\">{fixable.get(code, '') or ''}</td></tr>")
    return ["<h2>By rule</h2><table><thead><tr><th>code</th><th>rule</th><th>severity</th><th>summary</th>"
            "<th>findings</th><th>with a fix</th></tr></thead><tbody>", *rows, "</tbody></table>"]


def _summary_by_file(by_file: dict[str, list[Finding]]) -> list[str]:
    rows = []
    for path, items in by_file.items():
        sev = Counter(f.severity for f in items)
        codes = ", ".join(sorted({f.code for f in items}))
        rows.append(f'<tr><td><a href="#{_anchor(path)}"><code>{escape(path)}</code></a></td>'
                    f'<td class="num">{len(items)}</td><td class="num">{sev.get(Severity.ERROR, "")}</td>'
                    f'<td class="num">{sev.get(Severity.WARNING, "")}</td><td>{escape(codes)}</td></tr>')
    return ["<h2>By file</h2><table><thead><tr><th>file</th><th>findings</th><th>errors</th><th>warnings</th>"
            "<th>rules</th></tr></thead><tbody>", *rows, "</tbody></table>"]


def _finding_html(f: Finding, text: str | None, info: RuleInfo | None, pics: Sequence[ForwardPicture]) -> str:
    out = [f'<div class="finding {f.severity.value}" data-severity="{f.severity.value}" data-code="{f.code}">',
           f'<div class="head"><span class="badge">{escape(f.code)}</span>{escape(f.name)} '
           f'<span class="loc">{escape(place(f.path, f.location, f.cell))} \u00b7 {f.origin.value}'
           "</span></div>",
           f"<p>{_inline(f.message)}</p>"]
    if text is not None:
        out.append(_code_frame(text, f))
    if f.help:
        out.append(f"<p><b>Help:</b> {_inline(f.help)}</p>")
    for rel in f.related:
        out.append(f'<p class="note">Note: {_inline(rel.message)} ({escape(place(rel.path, rel.location, rel.cell))})'
                   "</p>")
    if f.fix is not None:
        out.append(_fix_html(f, text))
    for pic in pics:
        out.append(f"<figure><figcaption><b>{escape(pic.title)}</b>"
                   + (f" <span class=\"note\">{escape(pic.caption)}</span>" if pic.caption else "")
                   + f"</figcaption>{render_svg(pic)}</figure>")
    url = (info.url if info else "") or f.url
    if info is not None:
        out.append(f"<details><summary>About {escape(f.code)} {escape(f.name)}: what it does, why it matters, "
                   f'how to fix it</summary><div class="docs">{markdown_to_html(info.docs)}</div></details>')
    if url:
        out.append(f'<p class="note">Docs: <a href="{escape(url)}">{escape(url)}</a></p>')
    out.append("</div>")
    return "\n".join(out)


def _code_frame(text: str, f: Finding) -> str:
    lines = [line.rstrip("\r\n") for line in split_lines(text)]
    start_row, end_row = f.location.row, max(f.end_location.row, f.location.row)
    if not 1 <= start_row <= len(lines):
        return ""
    first, last = max(1, start_row - CONTEXT_LINES), min(len(lines), end_row + CONTEXT_LINES)
    out = ['<pre class="frame">']
    for n in range(first, last + 1):
        line = lines[n - 1]
        hit = start_row <= n <= end_row
        if hit:
            a = f.location.column - 1 if n == start_row else 0
            b = f.end_location.column - 1 if n == f.end_location.row else len(line)
            a, b = max(0, min(a, len(line))), max(0, min(b, len(line)))
            shown = escape(line[:a]) + (f"<mark>{escape(line[a:b])}</mark>" if b > a else "") + escape(line[b:])
        else:
            shown = escape(line)
        out.append(f'<span class="{"hit" if hit else "ctx"}"><span class="ln">{n}</span>{shown}</span>'
                   + ("" if hit else "\n"))
    out.append("</pre>")
    return "".join(out)


def _fix_html(f: Finding, text: str | None) -> str:
    fix = f.fix
    label = {
        Applicability.SAFE: "Fix (safe: applied by <code>--fix</code>)",
        Applicability.UNSAFE: "Fix (unsafe: applied by <code>--fix --unsafe-fixes</code>; review it)",
        Applicability.DISPLAY_ONLY: "Suggested fix (not applied automatically)",
    }[fix.applicability]  # type: ignore[union-attr]
    # A message may carry the suggested code after its first line (HKL201's display-only fix).
    first, _, code = fix.message.partition("\n")  # type: ignore[union-attr]
    out = [f"<p><b>{label}:</b> {_inline(first)}</p>"]
    if code.strip():
        out.append(f'<pre class="diff">{escape(code)}</pre>')
    after = preview(text, f) if text is not None else None
    if after is not None and after != text:
        diff = unified_diff(f.path, text, after).splitlines()[2:]  # the file header is the card's
        rendered = []
        for line in diff:
            cls = "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx"
            rendered.append(f'<span class="{cls}">{escape(line)}</span>' if cls != "ctx" else escape(line) + "\n")
        out.append('<pre class="diff">' + "".join(rendered) + "</pre>")
    return "\n".join(out)


def _notices(report: Report) -> list[str]:
    if not report.notices:
        return []
    rows = [f"<tr><td>{escape(n.level.value)}</td><td><code>{escape(n.path)}</code></td>"
            f"<td>{escape(n.message)}</td></tr>"
            for n in report.unique_notices()]
    return ["<h2>Notices</h2><p class=\"note\">What hooklint could not do or wants you to know; not findings.</p>"
            "<table><thead><tr><th>level</th><th>file</th><th>message</th></tr></thead><tbody>", *rows,
            "</tbody></table>"]


_INLINE = re.compile(r"`([^`]+)`|\[([^\]]+)\]\((https?://[^)\s]+)\)|\*\*([^*]+)\*\*")


def _inline(text: str) -> str:
    """Inline markdown of escaped-on-the-fly text: `code`, [link](https://...), **bold**."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(escape(text[pos:m.start()]))
        if m.group(1) is not None:
            out.append(f"<code>{escape(m.group(1))}</code>")
        elif m.group(2) is not None:
            out.append(f'<a href="{escape(m.group(3))}">{_inline(m.group(2))}</a>')
        else:
            out.append(f"<b>{escape(m.group(4))}</b>")
        pos = m.end()
    out.append(escape(text[pos:]))
    return "".join(out)


def markdown_to_html(markdown: str) -> str:
    """The subset of markdown rule docs use: headings, paragraphs, lists, fenced code."""
    out: list[str] = []
    para: list[str] = []
    items: list[str] = []
    code: list[str] | None = None

    def flush() -> None:
        if para:
            out.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for line in markdown.splitlines():
        if code is not None:
            if line.startswith("```"):
                out.append(f"<pre><code>{escape(chr(10).join(code))}</code></pre>")
                code = None
            else:
                code.append(line)
        elif line.startswith("```"):
            flush()
            code = []
        elif line.startswith("#"):
            flush()
            level = min(len(line) - len(line.lstrip("#")) + 2, 6)  # the page's own h1-h3 come first
            out.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
        elif line.startswith("- "):
            if para:
                flush()
            items.append(line[2:])
        elif not line.strip():
            flush()
        elif items and line.startswith("  "):
            items[-1] += " " + line.strip()
        else:
            if items:
                flush()
            para.append(line.strip())
    if code is not None:
        out.append(f"<pre><code>{escape(chr(10).join(code))}</code></pre>")
    flush()
    return "\n".join(out)
