"""The cache of static results (hooklint/results_cache.py)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import hooklint.results_cache as results_cache
import hooklint.static.source as source
from hooklint.config import Config
from hooklint.engine import CheckOptions, run_check
from hooklint.fsutil import load_summed_json, write_summed_json
from tests.conftest import run_cli

BAD = "import torch\nx = torch.ones(2, requires_grad=True)\nx.register_hook(lambda g: g.mul_(2))\n"
GOOD = "import torch\nx = torch.ones(2, requires_grad=True)\nx.register_hook(lambda g: g * 2)\n"
PLAIN = "def double(x):\n    return x * 2\n"


class Counters:
    def __init__(self, monkeypatch):
        self.parsed: list[str] = []
        self.read: list[str] = []
        real_parse = ast.parse
        real_read = source.read_regular_file

        def parse(text, filename="<unknown>", *args, **kwargs):
            if not os.path.isabs(str(filename)):  # the project's files (hooklint parses its own too)
                self.parsed.append(str(filename))
            return real_parse(text, filename, *args, **kwargs)

        def read(path):
            self.read.append(os.path.basename(path))
            return real_read(path)

        monkeypatch.setattr(ast, "parse", parse)
        monkeypatch.setattr(source, "read_regular_file", read)
        monkeypatch.setattr(results_cache, "read_regular_file", read)

    def reset(self):
        self.parsed.clear()
        self.read.clear()


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "plain.py").write_text(PLAIN)
    return tmp_path


def old_mtimes(folder: Path) -> None:
    """Files written a minute ago: outside the window in which a stat
    signature is not trusted (see RACY_NS)."""
    for path in folder.glob("*.py"):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 60 * 10 ** 9))


def check(root: Path, select: list[str] | None = None, jobs: int = 1, prefilter: bool = True):
    config = Config(root=root, select=select)
    options = CheckOptions(paths=["."], config=config, codes=frozenset(config.enabled_codes()), static_only=True,
                           jobs=jobs, prefilter=prefilter)
    options.extra["static_cache"] = results_cache.cache_for(config, prefilter, options.codes)
    report = run_check(options)
    return report, options.extra["static_cache"]


def summary(report) -> list[tuple[str, int, str, str]]:
    return sorted((f.path, f.location.row, f.code, f.message) for f in report.findings)


def test_a_warm_run_reads_and_parses_nothing(project, monkeypatch):
    old_mtimes(project)
    counters = Counters(monkeypatch)
    cold, cache = check(project)
    assert sorted(counters.read) == ["bad.py", "good.py", "plain.py"]
    assert counters.parsed == ["bad.py", "good.py"]  # plain.py is ruled out by its text
    counters.reset()
    warm, cache = check(project)
    assert counters.read == [] and counters.parsed == []
    assert cache.hits == 3
    assert summary(warm) == summary(cold) and [f.code for f in warm.findings] == ["HKL401"]


def test_a_touched_file_is_hashed_not_parsed(project, monkeypatch):
    old_mtimes(project)
    check(project)
    counters = Counters(monkeypatch)
    os.utime(project / "bad.py")  # new mtime, same bytes
    report, cache = check(project)
    assert counters.read == ["bad.py"] and counters.parsed == []
    assert [f.code for f in report.findings] == ["HKL401"]
    counters.reset()
    old_mtimes(project)
    check(project)
    check(project)
    assert counters.parsed == []


def test_changed_content_is_checked_again(project, monkeypatch):
    old_mtimes(project)
    check(project)
    (project / "good.py").write_text(BAD)
    (project / "bad.py").write_text(GOOD)
    counters = Counters(monkeypatch)
    report, _cache = check(project)
    assert sorted(counters.parsed) == ["bad.py", "good.py"]
    assert [f.path for f in report.findings] == ["good.py"]


def test_same_size_same_mtime_edit_within_the_racy_window(project, monkeypatch):
    """An edit that keeps the size and lands in the same timestamp as the
    previous read is invisible to stat; such recent files are hashed."""
    check(project)  # files written just now: inside the racy window
    path = project / "bad.py"
    st = path.stat()
    path.write_text(BAD.replace("mul_", "add_"))  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size
    report, _cache = check(project)
    assert [(f.path, f.code) for f in report.findings] == [("bad.py", "HKL401")]
    assert "add_" in report.findings[0].message


def test_the_key_covers_rules_prefilter_and_per_file_ignores(project, monkeypatch):
    old_mtimes(project)
    check(project)
    counters = Counters(monkeypatch)
    report, cache = check(project, select=["HKL3"])
    assert cache.hits == 0 and report.findings == []
    check(project, prefilter=False)
    assert "plain.py" in counters.parsed
    counters.reset()
    (project / "pyproject.toml").write_text('[tool.hooklint]\nper-file-ignores = {"bad.py" = ["HKL401"]}\n')
    from hooklint.config import load_config

    config = load_config(start=project)
    options = CheckOptions(paths=["."], config=config, codes=frozenset(config.enabled_codes()), static_only=True)
    options.extra["static_cache"] = results_cache.cache_for(config, True, options.codes)
    assert run_check(options).findings == []
    assert options.extra["static_cache"].hits == 0


def test_another_working_folder_gets_its_own_paths(project, monkeypatch):
    old_mtimes(project)
    check(project)
    sub = project / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    config = Config(root=project)
    options = CheckOptions(paths=[".."], config=config, codes=frozenset(config.enabled_codes()), static_only=True)
    options.extra["static_cache"] = results_cache.cache_for(config, True, options.codes)
    report = run_check(options)
    assert [f.path for f in report.findings] == [os.path.join("..", "bad.py")]


def test_a_corrupt_index_is_ignored_and_rewritten(project):
    old_mtimes(project)
    _report, cache = check(project)
    cache.index_path.write_text("{not json")
    report, cache = check(project)
    assert cache.hits == 0 and [f.code for f in report.findings] == ["HKL401"]
    assert load_summed_json(cache.index_path)["key"] == cache.key
    entries = load_summed_json(cache.index_path)["files"]
    entries[str(project / "bad.py")] = ["garbage"]
    write_summed_json(cache.index_path, {"key": cache.key, "files": entries})
    report, cache = check(project)
    assert [f.code for f in report.findings] == ["HKL401"]


def test_an_unwritable_cache_is_a_notice_not_a_failure(project):
    (project / "pyproject.toml").write_text('[tool.hooklint]\ncache-dir = "blocked/cache"\n')
    (project / "blocked").write_text("a file where the cache folder should be")
    proc = run_cli("check", "--static-only", "--output-format", "concise", ".", cwd=project)
    assert proc.returncode == 1 and "bad.py:3:" in proc.stdout
    assert "cannot write the cache in" in proc.stderr and "Traceback" not in proc.stderr


def test_the_folder_is_tagged_and_ignored_and_shared_with_the_graph_cache(project):
    proc = run_cli("check", "--static-only", ".", cwd=project)
    assert proc.returncode == 1
    folder = project / ".hooklint_cache"
    assert (folder / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (folder / ".gitignore").read_text() == "*\n"
    assert [p.parent.name for p in folder.glob("*/*.json")] == ["static"]
    tag = (folder / "CACHEDIR.TAG").stat()
    from hooklint.graph.cache import GraphCache

    graph = GraphCache(folder, "2.13.0", {})
    graph.put(graph.key("x"), {"facts": 1}, {})
    assert graph.error is None and graph.get(graph.key("x")) == {"facts": 1}
    assert sorted({p.name for p in folder.iterdir()}) == [".gitignore", "CACHEDIR.TAG", "graph", "static"]
    assert (folder / "CACHEDIR.TAG").stat().st_mtime_ns == tag.st_mtime_ns  # prepared once, by either


def test_no_cache_writes_nothing(project):
    proc = run_cli("check", "--static-only", "--no-cache", ".", cwd=project)
    assert proc.returncode == 1 and not (project / ".hooklint_cache").exists()
    (project / "pyproject.toml").write_text("[tool.hooklint]\ncache = false\n")
    proc = run_cli("check", "--static-only", ".", cwd=project)
    assert proc.returncode == 1 and not (project / ".hooklint_cache").exists()
