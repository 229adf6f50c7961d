"""The project pass (hooklint/parallel.py, hooklint/static/project.py): call
sites in other files, files the prefilter rules out, and the results cache."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

import hooklint.results_cache as results_cache
from hooklint.config import Config
from hooklint.engine import CheckOptions, run_check
from tests.conftest import run_cli
from tests.scale.test_cache import Counters, old_mtimes

LIBRARY = '''\
    class Saliency:
        def __init__(self, model, layer):
            self.model = model
            self.grads = []
            layer.register_full_backward_hook(self.save)

        def save(self, module, grad_input, grad_output):
            self.grads.append(grad_output[0])


    def add_probe(model, store):
        model.register_forward_hook(lambda m, i, o: store.append(o))
    '''
# No hook API word in it: the prefilter rules it out, the project pass reads it.
SCRIPT_IN_A_LOOP = '''\
    from attribution import Saliency, add_probe


    def explain(model, images):
        maps = []
        for image in images:
            explainer = Saliency(model, model.layer4)
            maps.append(explainer)
        return maps


    def train(model, loader, store):
        for epoch in range(10):
            add_probe(model, store)
            for batch in loader:
                model(batch)
    '''
SCRIPT_ONCE = '''\
    from attribution import Saliency, add_probe


    def explain(model, images):
        explainer = Saliency(model, model.layer4)
        return [explainer for image in images]


    def train(model, loader, store):
        add_probe(model, store)
        for epoch in range(10):
            for batch in loader:
                model(batch)
    '''


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "attribution.py").write_text(textwrap.dedent(LIBRARY))
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT_IN_A_LOOP))
    (tmp_path / "plain.py").write_text("def double(x):\n    return x * 2\n")
    return tmp_path


def check(root: Path, jobs: int = 1, cache: bool = True, paths: list[str] | None = None):
    config = Config(root=root)
    options = CheckOptions(paths=paths or ["."], config=config, codes=frozenset(config.enabled_codes()),
                           static_only=True, jobs=jobs)
    if cache:
        options.extra["static_cache"] = results_cache.cache_for(config, True, options.codes)
    report = run_check(options)
    return report, options


def leaks(report) -> list[tuple[str, int, str]]:
    return sorted((f.path, f.location.row, f.severity.value) for f in report.findings if f.code == "HKL304")


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_loop_in_another_file_makes_a_leak(project, jobs):
    report, options = check(project, jobs=jobs, cache=False)
    assert leaks(report) == [("attribution.py", 5, "error"), ("attribution.py", 12, "error")]
    by_line = {f.location.row: f for f in report.findings if f.code == "HKL304"}
    assert "`Saliency(...)` at train.py:7 runs on every iteration of the loop at line 6" in by_line[5].message
    assert "`add_probe(...)` at train.py:14 runs on every iteration of the loop at line 13" in by_line[12].message
    assert [(r.path, r.location.row) for r in by_line[12].related] == [("train.py", 14)]
    assert options.extra["project_pass"]["summarized"] == 1  # train.py, which the prefilter ruled out


# Without a call that repeats it, the public class's constructor is still an
# entry point users may call twice (a warning); the script's function is not.
ONLY_WARNINGS = [("attribution.py", 5, "warning")]


def test_each_file_alone_sees_no_proven_leak(project):
    report, _ = check(project, cache=False, paths=["attribution.py"])
    assert leaks(report) == ONLY_WARNINGS
    report, _ = check(project, cache=False, paths=["train.py"])
    assert leaks(report) == []


def test_called_once_is_no_proven_leak(project):
    (project / "train.py").write_text(textwrap.dedent(SCRIPT_ONCE))
    report, _ = check(project, cache=False)
    assert leaks(report) == ONLY_WARNINGS


def test_a_warm_run_reads_and_parses_nothing(project, monkeypatch):
    old_mtimes(project)
    cold, _ = check(project)
    counters = Counters(monkeypatch)
    warm, options = check(project)
    assert counters.read == [] and counters.parsed == []
    assert leaks(warm) == leaks(cold) and len(leaks(warm)) == 2
    assert options.extra["project_pass"] == {"searched": 0, "summarized": 0, "refined": 0, "rechecked": 0,
                                            "context": 0}


def test_an_edit_of_the_caller_reaches_the_cached_library_result(project, monkeypatch):
    old_mtimes(project)
    check(project)
    (project / "train.py").write_text(textwrap.dedent(SCRIPT_ONCE))
    counters = Counters(monkeypatch)
    report, _ = check(project)
    assert leaks(report) == ONLY_WARNINGS
    # the library's bytes did not change: it is checked again because its answers did
    assert "attribution.py" in counters.parsed
    (project / "train.py").write_text(textwrap.dedent(SCRIPT_IN_A_LOOP))
    report, _ = check(project)
    assert len(leaks(report)) == 2


def test_a_deleted_caller_and_a_new_caller(project):
    old_mtimes(project)
    check(project)
    os.remove(project / "train.py")
    report, _ = check(project)
    assert leaks(report) == ONLY_WARNINGS
    (project / "scripts").mkdir()
    (project / "scripts" / "run.py").write_text(textwrap.dedent(SCRIPT_IN_A_LOOP))
    report, _ = check(project)
    assert leaks(report) == [("attribution.py", 5, "error"), ("attribution.py", 12, "error")]


def test_a_new_file_is_searched_even_when_the_names_are_known(project, monkeypatch):
    """The cache knows which files do not name `Saliency`; a new one is read."""
    (project / "train.py").write_text(textwrap.dedent(SCRIPT_ONCE))
    old_mtimes(project)
    check(project)
    (project / "later.py").write_text(textwrap.dedent(SCRIPT_IN_A_LOOP))
    counters = Counters(monkeypatch)
    report, _ = check(project)
    assert "later.py" in counters.read and "plain.py" not in counters.read
    assert len(leaks(report)) == 2


def test_the_cli_reports_the_cross_file_leak(project):
    proc = run_cli("check", "--static-only", "--output-format", "concise", ".", cwd=project)
    assert proc.returncode == 1, proc.stderr
    assert "attribution.py:12:11: HKL304" in proc.stdout and "train.py:14" in proc.stdout


def test_a_package_with_relative_imports_and_a_re_export(tmp_path, monkeypatch):
    """`from .cam import GradCAM` in the package's __init__, a subclass in
    another module, the user's script importing from the package."""
    monkeypatch.chdir(tmp_path)
    pkg = tmp_path / "camlib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .cam import GradCAM\nfrom .plus import GradCAMPlus\n")
    (pkg / "base.py").write_text(textwrap.dedent('''\
        class ActivationsAndGradients:
            def __init__(self, model, target_layers):
                self.model = model
                for layer in target_layers:
                    layer.register_forward_hook(self.save)

            def save(self, module, inputs, output):
                self.last = output
        '''))
    (pkg / "cam.py").write_text(textwrap.dedent('''\
        from .base import ActivationsAndGradients


        class GradCAM:
            def __init__(self, model, target_layers):
                self.model = model
                self.grads = ActivationsAndGradients(self.model, target_layers)
        '''))
    (pkg / "plus.py").write_text(textwrap.dedent('''\
        from .cam import GradCAM


        class GradCAMPlus(GradCAM):
            pass
        '''))
    (tmp_path / "demo.py").write_text(textwrap.dedent('''\
        from camlib import GradCAMPlus


        def run(model, images):
            return [GradCAMPlus(model, [model.layer4]) for image in images]
        '''))
    report, _ = check(tmp_path, cache=False)
    found = [f for f in report.findings if f.code == "HKL304"]
    assert [(f.path, f.location.row) for f in found] == [(os.path.join("camlib", "base.py"), 5)]
    message = found[0].message
    assert "`GradCAM.__init__`" in message and "demo.py:5" in message, message


def test_the_project_fixture_separates_proven_leaks_from_entry_points(monkeypatch):
    """Errors where a call in the project repeats the registration; warnings
    where only an entry point (a constructor, a public method or function of
    the package) could; HKL308 where only an exception would leave the hooks."""
    from tests.conftest import FIXTURES

    folder = FIXTURES / "projects" / "attribution"
    monkeypatch.chdir(folder)
    report, _ = check(folder, cache=False)
    severities = {(f.path, f.location.row): f.severity.value for f in report.findings if f.code == "HKL304"}
    errors = {key for key, value in severities.items() if value == "error"}
    warnings = {key for key, value in severities.items() if value == "warning"}
    assert errors == {("explain/cam.py", 12), ("explain/cam.py", 13), ("explain/features.py", 8),
                      ("explain/guided.py", 14)}
    assert warnings == {("explain/probe.py", 34), ("explain/probe.py", 42)}
    # removals an exception skips are HKL308's, a warning of their own
    on_exception = {(f.path, f.location.row): f.severity.value for f in report.findings if f.code == "HKL308"}
    assert on_exception == {("explain/probe.py", 10): "warning", ("explain/probe.py", 70): "warning"}
    by_line = {f.location.row: f.message for f in report.findings if f.path == "explain/probe.py"}
    assert "only when `model(...)` at line 9 returns" in by_line[10]
    assert "every new object, `ActivationMonitor(...)`, registers the hook again" in by_line[42]


def test_a_cached_caller_is_searched_again_for_a_new_name(tmp_path, monkeypatch):
    """The cache knew `train.py` names none of the names searched in the first
    run; the library then gains a class that `train.py` builds in a loop."""
    monkeypatch.chdir(tmp_path)
    library = textwrap.dedent(LIBRARY)
    only_probe = library[library.index("def add_probe"):]
    (tmp_path / "attribution.py").write_text(only_probe)
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT_IN_A_LOOP))
    old_mtimes(tmp_path)
    report, _ = check(tmp_path)
    assert leaks(report) == [("attribution.py", 2, "error")]
    (tmp_path / "attribution.py").write_text(library)
    counters = Counters(monkeypatch)
    report, _ = check(tmp_path)
    assert "train.py" in counters.read
    assert leaks(report) == [("attribution.py", 5, "error"), ("attribution.py", 12, "error")]


WRAPPER_LIBRARY = '''\
    def add_hook(module, fn, dir="fwd"):
        if dir == "fwd":
            return module.register_forward_hook(fn)
        return module.register_full_backward_hook(fn)
    '''
# A wrapper that keeps the handles itself: its callers lose nothing.
KEEPING_LIBRARY = '''\
    HANDLES = []


    def add_hook(module, fn, dir="fwd"):
        HANDLES.append(module.register_forward_hook(fn))
    '''
# No hook API word: the prefilter rules it out; the wrapper makes it a registration.
WRAPPER_USER = '''\
    from hooklib import add_hook


    def saliency(model, batches, grads):
        for x in batches:
            add_hook(model, lambda m, gi, go: grads.append(go[0]), dir="bwd")
            model(x).sum().backward()
    '''


def test_a_wrappers_caller_is_checked_and_cached_with_the_wrapper(tmp_path, monkeypatch):
    """A file that calls another file's wrapper is checked whatever its text;
    its cached result follows the wrapper's edits."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hooklib.py").write_text(textwrap.dedent(WRAPPER_LIBRARY))
    (tmp_path / "user.py").write_text(textwrap.dedent(WRAPPER_USER))
    old_mtimes(tmp_path)
    cold, _ = check(tmp_path)
    assert leaks(cold) == [("user.py", 6, "error")]
    assert "through `add_hook` (hooklib.py:1)" in next(f.message for f in cold.findings if f.code == "HKL304")
    counters = Counters(monkeypatch)
    warm, options = check(tmp_path)
    assert counters.parsed == [] and leaks(warm) == leaks(cold)
    (tmp_path / "hooklib.py").write_text(textwrap.dedent(KEEPING_LIBRARY))
    edited, _ = check(tmp_path)
    assert leaks(edited) == []


def test_a_helper_re_exported_twice_is_found_along_its_modules_only(tmp_path, monkeypatch):
    """HKL701 asks what `pkg.attach(model.fc)` registers: `pkg/__init__.py`
    re-exports it from `pkg.sub`, which re-exports it from `pkg.sub.helpers`.
    Neither `__init__.py` says a hook word (the prefilter rules them out), so
    the project pass summarizes them; the other files that say `attach` but
    cannot be on the way (`attach` as an identifier in a module of another
    name) are not summarized for it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.sub import attach\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("from .helpers import attach\n")
    (tmp_path / "pkg" / "sub" / "helpers.py").write_text(textwrap.dedent('''\
        def _record(module, inputs, output):
            print(output.shape)


        def attach(module):
            return module.register_forward_hook(_record)
        '''))
    for i in range(3):  # they name `attach` and nothing of the project
        (tmp_path / f"other{i}.py").write_text("def attach(x):\n    return x\n\n\nattach(1)\n")
    (tmp_path / "train.py").write_text(textwrap.dedent('''\
        import torch
        import torch.nn as nn
        import pkg


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)

            def forward(self, x):
                return self.fc(x)


        def main():
            model = Net()
            compiled = torch.compile(model)
            x = torch.randn(2, 4)
            compiled(x)
            pkg.attach(model.fc)
            compiled(x)
        '''))
    report, options = check(tmp_path, cache=False)
    assert [(f.path, f.location.row) for f in report.findings if f.code == "HKL701"] == [("train.py", 20)]
    assert options.extra["project_pass"]["summarized"] == 2  # the two __init__.py, not other*.py


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_wrappers_caller_the_prefilter_admits_keeps_its_cross_file_leaks(tmp_path, monkeypatch, jobs):
    """A word some rule triggers on (`children` in a comment) must not change
    what the file's calls through another file's wrapper are: the admitted
    file's first check knew nothing of the wrapper, so it is checked again
    with the wrapper's facts and its callers searched (the project fixture
    `wrappers` lost both of its cross-file leaks that way)."""
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "projects" / "wrappers"
    plain = tmp_path / "plain"
    worded = tmp_path / "worded"
    shutil.copytree(fixture, plain)
    shutil.copytree(fixture, worded)
    probes = worded / "tools" / "probes.py"
    probes.write_text("# walks the model's children\n" + probes.read_text())
    monkeypatch.chdir(plain)
    before, _ = check(plain, jobs=jobs, cache=False)
    monkeypatch.chdir(worded)
    after, _ = check(worded, jobs=jobs, cache=False)
    expected = [(path, row) for path, row, _ in leaks(before) if path.endswith("probes.py")]
    assert len(expected) == 2
    assert [(path, row - 1) for path, row, _ in leaks(after) if path.endswith("probes.py")] == expected
