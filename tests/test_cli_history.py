"""Verdicts do not depend on what ran before.

pre-commit runs `.pre-commit-hooks.yaml`'s entry on the staged files only.
A staged library whose hook registration is repeated by a training script
elsewhere in the project must get the same findings, severities and exit
code whether the cache is empty, warm from earlier one-file runs, warm from
a run over the whole project, or stale (the caller edited or deleted since
the cache was written): the project's other files are always searched for
callers (docs/developing.md, "Cross-file analysis")."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

LIBRARY = """\
    def add_feature_hooks(model, names, store):
        for name in names:
            layer = model.get_submodule(name)
            layer.register_forward_hook(lambda m, i, o, name=name: store.setdefault(name, []).append(o))
    """
CALLER_IN_A_LOOP = """\
    from lib.features import add_feature_hooks


    def features_per_epoch(model, loader, epochs):
        store = {}
        for epoch in range(epochs):
            add_feature_hooks(model, ["layer3", "layer4"], store)
            for images, _labels in loader:
                model(images)
        return store
    """
CALLER_ONCE = """\
    from lib.features import add_feature_hooks


    def features(model, loader):
        store = {}
        add_feature_hooks(model, ["layer3", "layer4"], store)
        for images, _labels in loader:
            model(images)
        return store
    """
STAGED = "lib/features.py"


def precommit_entry() -> list[str]:
    """The `hooklint` hook's entry, as pre-commit runs it (without `hooklint` itself)."""
    import yaml

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    entry = next(h["entry"] for h in hooks if h["id"] == "hooklint")
    words = shlex.split(entry)
    assert words[:2] == ["hooklint", "check"] and "--force-exclude" in words, entry
    return words[1:]


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "proj"
    (root / "lib").mkdir(parents=True)
    (root / "scripts").mkdir()
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "features.py").write_text(textwrap.dedent(LIBRARY))
    (root / "scripts" / "train.py").write_text(textwrap.dedent(CALLER_IN_A_LOOP))
    (root / "pyproject.toml").write_text("[tool.hooklint]\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", STAGED], cwd=root, check=True)
    return root


def staged_run(project: Path) -> tuple[int, list[dict], str]:
    """(exit code, findings as JSON, stdout of the concise format) of the hook on the staged file."""
    as_json = run_cli(*precommit_entry(), "--output-format", "json", STAGED, cwd=project)
    concise = run_cli(*precommit_entry(), "--output-format", "concise", STAGED, cwd=project)
    assert as_json.returncode == concise.returncode, (as_json.stderr, concise.stderr)
    assert as_json.returncode in (0, 1), as_json.stderr
    findings = [{k: f[k] for k in ("code", "severity", "message", "location", "related")}
                for f in json.loads(as_json.stdout)]
    return as_json.returncode, findings, concise.stdout


def fresh_run(project: Path) -> tuple[int, list[dict], str]:
    shutil.rmtree(project / ".hooklint_cache", ignore_errors=True)
    return staged_run(project)


def test_the_staged_file_gets_one_verdict_whatever_the_cache_holds(project):
    empty = fresh_run(project)
    code, findings, _concise = empty
    # the loop in scripts/train.py, a file pre-commit did not pass, decides: an error
    assert code == 1
    assert [(f["code"], f["severity"]) for f in findings] == [("HKL304", "error")], findings
    assert "scripts/train.py:7 runs on every iteration of the loop" in findings[0]["message"]
    assert staged_run(project) == empty  # warm: the cache of the run before
    assert staged_run(project) == empty
    whole = run_cli("check", "--static-only", "--output-format", "json", ".", cwd=project)
    assert whole.returncode == 1
    assert [f for f in json.loads(whole.stdout) if f["filename"] == STAGED][0]["message"] == findings[0]["message"]
    assert staged_run(project) == empty  # warm: the cache of the whole project


def test_a_caller_the_prefilter_admits_and_the_cache_holds_as_context(project):
    """The staged run stores `scripts/train.py` as context (a summary, no
    result).  The whole project's run then checks it: written within the
    racy window of that read, its bytes hash as stored, and the result reused
    under them was none, so the file was checked again without its summary;
    a parsed file without a summary has no call sites, and its callers were
    never searched: the loop was lost (a warning instead of the error).  The
    comment names a hook API, so the prefilter admits the caller whatever
    the rules' patterns; its mtime in the future keeps every read racy."""
    import os
    import time

    train = project / "scripts" / "train.py"
    train.write_text(textwrap.dedent(CALLER_IN_A_LOOP) + "# its features come from register_forward_hook\n")
    later = time.time_ns() + 3_600 * 10**9
    os.utime(train, ns=(later, later))
    _code, findings, _concise = staged_run(project)
    assert "scripts/train.py:7 runs on every iteration of the loop" in findings[0]["message"], findings
    whole = run_cli("check", "--static-only", "--output-format", "json", ".", cwd=project)
    assert whole.returncode == 1, whole.stderr
    assert [f for f in json.loads(whole.stdout) if f["filename"] == STAGED][0]["message"] == findings[0]["message"]
    assert staged_run(project) == (_code, findings, _concise)  # warm: the cache of the whole project


def test_a_caller_edited_since_the_cache_was_written(project):
    staged_run(project)
    run_cli("check", "--static-only", ".", cwd=project)
    (project / "scripts" / "train.py").write_text(textwrap.dedent(CALLER_ONCE))
    stale = staged_run(project)
    assert stale == fresh_run(project)
    # called once, from a script: nothing in the tree repeats the registration, but a public function that
    # drops the handle leaks for any other caller (issue 15): a warning, not the error a loop makes
    assert [f["severity"] for f in stale[1]] == ["warning"], stale
    (project / "scripts" / "train.py").write_text(textwrap.dedent(CALLER_IN_A_LOOP))
    again = staged_run(project)
    assert again == fresh_run(project) and again[1][0]["severity"] == "error"


def test_a_caller_deleted_since_the_cache_was_written(project):
    before = staged_run(project)
    assert before[1][0]["severity"] == "error"
    (project / "scripts" / "train.py").unlink()
    stale = staged_run(project)
    assert stale == fresh_run(project)
    assert stale[1][0]["severity"] == "warning"


def test_a_caller_in_a_notebook_counts_too(project):
    """The user's project has a notebook: its cells call the library in a loop."""
    (project / "scripts" / "train.py").unlink()
    cell = ("from lib.features import add_feature_hooks\nstore = {}\nfor epoch in range(3):\n"
            "    add_feature_hooks(net, ['fc'], store)\n")
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                           "source": cell.splitlines(keepends=True)}],
                "metadata": {"kernelspec": {"language": "python", "name": "python3", "display_name": "Python 3"}},
                "nbformat": 4, "nbformat_minor": 5}
    (project / "explore.ipynb").write_text(json.dumps(notebook))
    empty = fresh_run(project)
    assert empty[1][0]["severity"] == "error" and "explore.ipynb" in empty[1][0]["message"], empty
    assert staged_run(project) == empty


def test_outside_a_project_only_the_files_of_the_run_count(tmp_path):
    """No configuration, no .git, no pyproject.toml above the file: a loose
    script is judged alone (nothing says which folder would be its project)."""
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "features.py").write_text(textwrap.dedent(LIBRARY).replace("lib.features", "features"))
    (loose / "train.py").write_text(textwrap.dedent(CALLER_IN_A_LOOP).replace("lib.features", "features"))
    alone = run_cli("check", "--static-only", "--output-format", "json", "features.py", cwd=loose)
    both = run_cli("check", "--static-only", "--output-format", "json", ".", cwd=loose)
    assert alone.returncode == 0 and json.loads(alone.stdout) == []  # a script's function, called by nothing
    assert [f["severity"] for f in json.loads(both.stdout)] == ["error"]
    again = run_cli("check", "--static-only", "--output-format", "json", "features.py", cwd=loose)
    assert again.stdout == alone.stdout and again.returncode == alone.returncode
