"""`hooklint report`: one self-contained HTML page.  Unit checks of its
content (escaping, summaries, fixes, the forward-ops picture), then the page
opened in real headless Chromium (Debian's `chromium`, installed by `make
test`): it must render with no console message at all (no script error, no
blocked network request) and a screenshot is saved under the test's tmp
folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import run_cli
from hooklint.cli.report import forward_pictures
from hooklint.findings import Applicability, Edit, Finding, Fix, Location, Notice, NoticeLevel, Related, Report, \
    Severity
from hooklint.graph.facts import FileFacts, ModelFacts, ModuleFacts, Op, TensorSpec
from hooklint.report import rule_catalog
from hooklint.report.html import markdown_to_html, render_html
from hooklint.report.svg import MAX_OPS, ForwardPicture, PictureOp, render_svg

SEED = """\
import torch
import torch.nn as nn

class MyMean(nn.Module):
    def forward(self, x):
        return x / 4

class MyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.f1 = nn.Linear(4, 1)
        self.f2 = MyMean()

    def forward(self, x):
        return self.f2(self.f1(x))

    def hook(self, module, grad_input, grad_output):
        print(grad_input)

net = MyNet()
net.register_backward_hook(net.hook)
"""

HOSTILE = '</pre><script>alert("x")</script><img src="https://evil.example/x.png">'


def seed_facts(path: str) -> FileFacts:
    """What the graph layer reports for SEED (the shapes of facts.py; values as
    hook-semantics.md section 1 shows them for this model)."""
    addmm = Op("AddmmBackward0", "f1", path, 15, "MyNet.forward", "return self.f2(self.f1(x))",
               grad_input=[(1,), (1, 4), (4, 1)])
    div = Op("DivBackward0", "f2", path, 6, "MyMean.forward", "return x / 4", grad_input=[(1, 1)])
    root = ModuleFacts("", "MyNet", "seed.MyNet", path, 8, calls=1, ops=(addmm, div), bound=div,
                       bound_is_own=True, legacy_safe=False)
    model = ModelFacts("MyNet", path, 8, "MyNet()", call_line=20, origin_file=path, method="fx",
                       inputs=(TensorSpec("float32", (1, 4)),), modules=(root,))
    return FileFacts(path, models=[model])


@pytest.fixture
def seed_project(tmp_path):
    (tmp_path / "seed.py").write_text(SEED)
    return tmp_path


def static_report(project: Path) -> tuple[Report, dict]:
    from hooklint.config import resolve_codes
    from hooklint.static.checker import check_file

    cwd = os.getcwd()
    os.chdir(project)  # findings name files relative to the working folder, as the CLI does
    try:
        result = check_file("seed.py", frozenset(resolve_codes(None, [], [])))
    finally:
        os.chdir(cwd)
    report = Report(result.findings, files_checked=1)
    return report, {"seed.py": SEED}


def rich_page(project: Path) -> str:
    """A page with every feature: findings with fixes and related notes, a forward picture,
    notices, and hostile text from a user's file."""
    report, texts = static_report(project)
    hostile = Finding("HKL101", "legacy-backward-hook", HOSTILE, "seed.py", Location(20, 1), Location(20, 4),
                      Severity.WARNING, help=HOSTILE,
                      fix=Fix(HOSTILE, (Edit("# " + HOSTILE + "\n", Location(20, 1), Location(20, 1)),),
                              Applicability.DISPLAY_ONLY),
                      related=(Related(HOSTILE, "seed.py", Location(1, 1)),), url="https://example.invalid/d")
    report.findings.append(hostile)
    report.notices.append(Notice("<b>bad</b>.py", HOSTILE, NoticeLevel.SKIP))
    pictures = forward_pictures(report, {"seed.py": seed_facts("seed.py")}, texts.get)
    return render_html(report, sources=texts.get, catalog=rule_catalog(), pictures=pictures)


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags(page: str) -> list[tuple[str, dict]]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


class TestContent:
    def test_user_text_is_escaped_and_nothing_is_loaded(self, seed_project):
        page = rich_page(seed_project)
        found = tags(page)
        assert [t for t, _ in found].count("script") == 1  # ours, inline
        assert not [a for t, a in found if t == "img" or "src" in a or (t == "link")]
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
        csp = [a for t, a in found if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
        assert csp and "default-src 'none'" in csp[0]["content"]

    def test_summaries_frames_fixes_and_docs(self, seed_project):
        page = rich_page(seed_project)
        assert re.search(r"<h2>By rule</h2>.*HKL101.*HKL102", page, re.S)
        assert re.search(r"<h2>By file</h2>.*seed\.py", page, re.S)
        # the code frame marks the flagged span
        assert '<span class="ln">21</span>net.<mark>register_backward_hook</mark>(net.hook)' in page
        # HKL101's fix as a diff
        assert '<span class="add">+net.register_full_backward_hook(net.hook)</span>' in page
        # the rule's documentation, rendered
        assert "<h4>Why is this bad?</h4>" in page and "docs/rules/HKL102.md" in page

    def test_forward_picture_highlights_the_bound_op(self, seed_project):
        report, texts = static_report(seed_project)
        pictures = forward_pictures(report, {"seed.py": seed_facts("seed.py")}, texts.get)
        assert sorted(f.code for f in pictures) == ["HKL101", "HKL102"]
        [pic] = next(iter(pictures.values()))
        assert [op.label for op in pic.ops] == ["Addmm", "Div"] and pic.bound == 1
        svg = render_svg(pic)
        assert re.search(r'<g class="op bound" data-index="1">.*?>Div</text>', svg)
        assert "the legacy hook binds here" in svg

    def test_no_picture_without_graph_facts_or_for_other_modules(self, seed_project):
        report, texts = static_report(seed_project)
        assert forward_pictures(report, {}, texts.get) == {}
        other = seed_facts("seed.py")
        other.models[0] = ModelFacts("Other", None, None, "Other()",
                                     modules=(ModuleFacts("", "Other", "x.Other", ops=other.models[0].modules[0].ops),))
        assert forward_pictures(report, {"seed.py": other}, texts.get) == {}

    def test_long_forward_is_cut_but_keeps_the_bound_op(self):
        ops = tuple(PictureOp(f"op{i}", "") for i in range(200))
        svg = render_svg(ForwardPicture("t", ops, bound=100))
        assert svg.count('<g class="op') < MAX_OPS and ">op100</text>" in svg and "more ops" in svg

    def test_markdown_subset(self):
        html = markdown_to_html("## Example\nText with `x<y>` and [a link](https://e.x/a?b=1&c=2).\n\n"
                                "```python\nif a < b:\n    pass\n```\n- one\n- two `t`\n")
        assert "<h4>Example</h4>" in html
        assert "<code>x&lt;y&gt;</code>" in html and '<a href="https://e.x/a?b=1&amp;c=2">a link</a>' in html
        assert "<pre><code>if a &lt; b:\n    pass</code></pre>" in html
        assert "<ul><li>one</li><li>two <code>t</code></li></ul>" in html


class TestCli:
    def test_writes_the_page_and_exits_like_check(self, seed_project):
        r = run_cli("report", "--static-only", ".", "-o", "out.html", cwd=seed_project)
        assert r.returncode == 1, r.stderr
        assert "Wrote out.html: 2 findings in 1 file (1 checked)." in r.stderr
        page = (seed_project / "out.html").read_text(encoding="utf-8")
        assert page.startswith("<!DOCTYPE html>") and "HKL102" in page

    def test_clean_project(self, tmp_path):
        (tmp_path / "ok.py").write_text("import torch\n")
        r = run_cli("report", "--static-only", "-o", "r.html", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "All checks passed." in (tmp_path / "r.html").read_text(encoding="utf-8")


# -- real headless Chromium ------------------------------------------------------------------

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


MISSING_CHROMIUM = ("Chromium not found: `make test` installs Debian's `chromium` as root or through sudo "
                    "(or set CHROMIUM to a Chromium binary)")


def chromium() -> str:
    """The Chromium binary; without one, the test is skipped on a developer's
    machine and fails on CI (the `CI` environment variable set), which must run it."""
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{MISSING_CHROMIUM}; CI is set, so the HTML report test must run")
        pytest.skip(MISSING_CHROMIUM)
    return path


def open_in_chromium(page: Path, workdir: Path) -> tuple[str, list[str]]:
    """The DOM after scripts ran, and every console message the page produced."""
    profile = workdir / f"profile-dump-{page.stem}"
    r = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
                        "--v=0", "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
    return r.stdout, console


def screenshot(page: Path, png: Path, workdir: Path) -> None:
    profile = workdir / f"profile-shot-{page.stem}"
    r = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1280,2400",
                        f"--screenshot={png}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.slow
class TestChromium:
    def test_rich_page_renders_cleanly(self, seed_project, tmp_path):
        page = tmp_path / "report.html"
        page.write_text(rich_page(seed_project), encoding="utf-8")
        dom, console = open_in_chromium(page, tmp_path)
        assert console == []
        assert 'data-ready="1"' in dom  # the page's script ran to its end
        assert re.search(r'<span id="shown">3</span>', dom)  # ... and counted the findings
        assert '<g class="op bound"' in dom and "<svg" in dom
        png = tmp_path / "report.png"
        screenshot(page, png, tmp_path)
        data = png.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000

    def test_cli_page_renders_cleanly(self, seed_project, tmp_path):
        r = run_cli("report", "--static-only", ".", "-o", str(tmp_path / "cli.html"), cwd=seed_project)
        assert r.returncode == 1, r.stderr
        dom, console = open_in_chromium(tmp_path / "cli.html", tmp_path)
        assert console == [] and 'data-ready="1"' in dom
        screenshot(tmp_path / "cli.html", tmp_path / "cli.png", tmp_path)
        assert (tmp_path / "cli.png").stat().st_size > 20_000

    def test_the_console_check_catches_errors(self, tmp_path):
        """The check above can fail: a script error and a blocked network load are both seen."""
        page = tmp_path / "broken.html"
        good = render_html(Report(), sources=lambda _p: None, catalog={})
        page.write_text(good.replace("</body>", '<script>notDefined()</script><img src="https://e.invalid/x.png">'
                                     "</body>"), encoding="utf-8")
        _dom, console = open_in_chromium(page, tmp_path)
        text = "\n".join(console)
        assert "notDefined is not defined" in text
        assert "Content Security Policy" in text


def test_display_only_fix_code_is_shown(tmp_path):
    from integrations.test_fix_cli import HKL201_DISPLAY

    (tmp_path / "f.py").write_text(HKL201_DISPLAY)
    r = run_cli("report", "--static-only", "f.py", "-o", "f.html", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    page = (tmp_path / "f.html").read_text(encoding="utf-8")
    assert re.search(r"Suggested fix \(not applied automatically\):</b>.*?</p>\s*<pre class=\"diff\">[^<]*"
                     r"register_post_accumulate_grad_hook", page, re.S)


@pytest.mark.torch
@pytest.mark.slow
def test_real_graph_facts_picture_in_chromium(seed_project, tmp_path, monkeypatch):
    """The graph layer's real facts for SEED (a worker imports it and traces MyNet
    with torch.fx): the picture shows MyNet's forward with `x / 4` (DivBackward0)
    highlighted, the op hook-semantics.md section 1 shows the legacy hook binds to."""
    from hooklint.config import Config
    from hooklint.graph.provider import provide_graph_facts

    monkeypatch.chdir(seed_project)
    facts, notices = provide_graph_facts(["seed.py"], Config(root=seed_project.resolve()), use_cache=False)
    assert "seed.py" in facts, notices
    report, texts = static_report(seed_project)
    pictures = forward_pictures(report, facts, texts.get)
    pics = pictures[next(f for f in report.findings if f.code == "HKL102")]
    root = next(p for p in pics if p.title.startswith("MyNet"))
    assert root.ops[root.bound].label == "Div"
    assert "MyMean.forward" in root.ops[root.bound].detail
    page = tmp_path / "graph.html"
    page.write_text(render_html(report, sources=texts.get, catalog=rule_catalog(), pictures=pictures),
                    encoding="utf-8")
    dom, console = open_in_chromium(page, tmp_path)
    assert console == [] and 'data-ready="1"' in dom and '<g class="op bound"' in dom
    screenshot(page, tmp_path / "graph.png", tmp_path)


def test_without_chromium_skip_locally_fail_on_ci(tmp_path, monkeypatch):
    """The rule above, decided by `chromium()` itself."""
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="Chromium not found"):
        chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set, so the HTML report test must run"):
        chromium()
