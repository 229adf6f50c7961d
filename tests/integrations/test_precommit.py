"""The real `pre-commit try-repo` against this repository's
.pre-commit-hooks.yaml: pre-commit installs hooklint into a fresh virtualenv
(from the package index, without torch) and runs the `hooklint` hook on a
temporary git repository.  A buggy file fails with its finding shown, a clean
file passes.  Slow (tens of seconds: it builds and installs hooklint)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

BUGGY = """\
import torch.nn as nn

def log(module, grad_input, grad_output):
    print(grad_input[0].norm())

layer = nn.Linear(4, 2)
layer.register_backward_hook(log)
"""

CLEAN = """\
import torch.nn as nn

def log(module, grad_input, grad_output):
    print(grad_input[0].norm())

layer = nn.Linear(4, 2)
layer.register_full_backward_hook(log)
"""

# What pip needs to build hooklint, as a git checkout of this repository has it.
_PACKAGE_FILES = ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml")


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=hooklint tests", "-c", "user.email=tests@hooklint.invalid",
                    "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *args],
                   cwd=cwd, check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def hooks_repo(tmp_path_factory) -> Path:
    """A committed copy of the working tree's package (try-repo needs a git
    repository, and /work/main's own history is not ours to touch)."""
    repo = tmp_path_factory.mktemp("hooklint-repo")
    for name in _PACKAGE_FILES:
        shutil.copy2(ROOT / name, repo / name)
    shutil.copytree(ROOT / "hooklint", repo / "hooklint", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "hooklint under test")
    return repo


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory) -> Path:
    # kept out of the user's ~/.cache/pre-commit
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "buggy.py").write_text(BUGGY)
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "notes.txt").write_text("register_backward_hook in prose is not code\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    return tmp_path


def try_repo(project: Path, hooks_repo: Path, home: Path, *files: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PRE_COMMIT_HOME=str(home), NO_COLOR="1", PRE_COMMIT_COLOR="never")
    env.pop("HOOKLINT_STRICT", None)  # the hook runs as users run it
    return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(hooks_repo), "hooklint",
                           "--files", *files], cwd=project, env=env, capture_output=True, text=True, timeout=600)


def test_buggy_file_fails_with_its_finding(project, hooks_repo, pre_commit_home):
    r = try_repo(project, hooks_repo, pre_commit_home, "buggy.py", "notes.txt")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "hooklint" in out and "Failed" in out
    assert "buggy.py:7:7: HKL101" in out
    assert "buggy.py:7:7: HKL102" in out
    assert "notes.txt" not in out.split("Failed", 1)[1]  # types_or: only Python files are passed


def test_clean_file_passes(project, hooks_repo, pre_commit_home):
    r = try_repo(project, hooks_repo, pre_commit_home, "clean.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "Passed" in out


def test_hook_environment_has_no_torch(project, hooks_repo, tmp_path_factory):
    """Through a .pre-commit-config.yaml, as projects use it (try-repo throws
    its environment away): the installed environment has hooklint, not torch."""
    home = tmp_path_factory.mktemp("pre-commit-home-config")
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=hooks_repo, capture_output=True, text=True,
                         check=True).stdout.strip()
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {hooks_repo}\n  rev: {rev}\n  hooks:\n  - id: hooklint\n")
    env = dict(os.environ, PRE_COMMIT_HOME=str(home), PRE_COMMIT_COLOR="never")
    r = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--files", "buggy.py"], cwd=project, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "HKL101" in r.stdout, r.stdout + r.stderr
    pythons = sorted(home.glob("repo*/py_env-*/bin/python"))
    assert len(pythons) == 1, f"expected one pre-commit environment under {home}"
    probe = ("import importlib.metadata as m, importlib.util as u; "
             "print(m.version('hooklint'), u.find_spec('torch') is None)")
    r = subprocess.run([str(pythons[0]), "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["0.1.0", "True"], r.stdout + r.stderr


# ---------------------------------------------------------------- the README's snippet, as written

NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
               "source": ["%matplotlib inline\n", "import torch.nn as nn\n", "layer = nn.Linear(4, 2)\n"]},
              {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
               "source": ["layer.register_backward_hook(lambda m, gi, go: print(gi[0]))\n"]}],
    "metadata": {"kernelspec": {"language": "python", "name": "python3", "display_name": "Python 3"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def readme_blocks() -> list[str]:
    import re
    import textwrap

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [textwrap.dedent(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def readme_snippet() -> str:
    """The .pre-commit-config.yaml block of the README, exactly as written there."""
    for block in readme_blocks():
        if block.startswith("# .pre-commit-config.yaml"):
            return block
    raise AssertionError("the README has no .pre-commit-config.yaml snippet")


def readme_remote_snippet() -> str:
    """The README's other form: hooklint's own repository at a commit."""
    for block in readme_blocks():
        if block.startswith("- repo: https://github.com/hooklint/hooklint"):
            return "repos:\n" + block
    raise AssertionError("the README has no snippet with hooklint's repository")


def run_readme_config(project: Path, hooks_repo: Path, home: Path, config: str, *files: str):
    """The snippet; in the remote form, with `repo:` and `rev:` pointing at the
    package under test (the only two values a user would not copy as they are)."""
    import re

    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=hooks_repo, capture_output=True, text=True,
                         check=True).stdout.strip()
    config = config.replace("https://github.com/hooklint/hooklint", str(hooks_repo))
    config = re.sub(r"rev: [0-9a-f]{40}", f"rev: {rev}", config)
    (project / ".pre-commit-config.yaml").write_text(config)
    env = dict(os.environ, PRE_COMMIT_HOME=str(home), PRE_COMMIT_COLOR="never", NO_COLOR="1")
    env.pop("HOOKLINT_STRICT", None)
    # `language: system` runs the `hooklint` on PATH: this test environment's, next to torch
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--files", *files], cwd=project, env=env,
                          capture_output=True, text=True, timeout=900)


def test_readme_snippet_as_written(project, hooks_repo, pre_commit_home):
    import json

    (project / "nb.ipynb").write_text(json.dumps(NOTEBOOK, indent=1) + "\n")
    git(project, "add", "-A")
    config = readme_snippet()
    assert "- id: hooklint " in config and "repo: local" in config
    r = run_readme_config(project, hooks_repo, pre_commit_home, config, "buggy.py", "clean.py", "nb.ipynb",
                          "notes.txt")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "buggy.py:7:7: HKL101" in out and "nb.ipynb:cell 2:1:7: HKL101" in out, out
    r = run_readme_config(project, hooks_repo, pre_commit_home, config, "clean.py")
    assert r.returncode == 0 and "Passed" in r.stdout, r.stdout + r.stderr


@pytest.mark.torch
def test_readme_snippet_with_the_graph_hook(project, hooks_repo, pre_commit_home):
    """The commented-out `hooklint-graph` hook, switched on: `language: system`
    runs the hooklint installed next to torch, with the graph layer."""
    config = readme_snippet()
    assert "# - id: hooklint-graph" in config
    config = _uncomment_graph_hook(config)
    r = run_readme_config(project, hooks_repo, pre_commit_home, config, "buggy.py")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "hooklint (with model graphs)" in out and out.count("buggy.py:7:7: HKL101") == 2, out
    r = run_readme_config(project, hooks_repo, pre_commit_home, config, "clean.py")
    assert r.returncode == 0 and r.stdout.count("Passed") == 2, r.stdout + r.stderr


def _uncomment_graph_hook(config: str) -> str:
    """The commented-out `hooklint-graph` hook of the snippet, switched on."""
    lines = config.splitlines()
    start = next(i for i, line in enumerate(lines) if "# - id: hooklint-graph" in line)
    indent = len(lines[start]) - len(lines[start].lstrip())
    for i in range(start, len(lines)):
        line = lines[i]
        if not line.strip().startswith("#") or len(line) - len(line.lstrip()) != indent:
            break
        lines[i] = line[:indent] + line[indent:].replace("# ", "", 1)
    return "\n".join(lines) + "\n"


def test_readme_remote_snippet_with_a_commit(project, hooks_repo, pre_commit_home):
    """The README's `repo: <hooklint> rev: <commit>` form: pre-commit installs
    hooklint from the repository's .pre-commit-hooks.yaml at that commit."""
    config = readme_remote_snippet()
    r = run_readme_config(project, hooks_repo, pre_commit_home, config, "buggy.py", "notes.txt")
    assert r.returncode == 1 and "buggy.py:7:7: HKL101" in r.stdout, r.stdout + r.stderr
    r = run_readme_config(project, hooks_repo, pre_commit_home, config, "clean.py")
    assert r.returncode == 0 and "Passed" in r.stdout, r.stdout + r.stderr
