"""What ruff users reach for, through the real command (issue 18): the
severity threshold (`fail-on`), `--watch`, `--color` with NO_COLOR and
FORCE_COLOR, `--fix-only`, `--exit-non-zero-on-fix`, `--ignore-noqa`, inline
`--config KEY=VALUE`, `hooklint version`, `hooklint clean`, the unused-noqa
rule, and the summary that `concise` and `-o FILE` print."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, run_cli

# HKL405 (info) only: printed, but it does not fail a run by default
INFO_ONLY = """\
class Saliency:
    def __init__(self, model, target_layer):
        self.model = model
        self.handle = target_layer.register_full_backward_hook(self.save)

    def save(self, module, grad_input, grad_output):
        self.grad = grad_output[0]

    def remove(self):
        self.handle.remove()
"""
# HKL101 (a warning) on line 7
LEGACY = """\
import torch.nn as nn

def log(module, grad_input, grad_output):
    print(grad_output[0].norm())

layer = nn.Linear(4, 2)
layer.register_backward_hook(log)
"""
# an unused `# noqa: HKL101` (HKL003, safe fix) and the legacy hook of LEGACY
STALE_NOQA = LEGACY + "other = nn.Linear(4, 2)\nother.register_full_backward_hook(log)  # noqa: HKL101\n"
ANSI = "\x1b["


@pytest.fixture
def project(tmp_path):
    (tmp_path / "saliency.py").write_text(INFO_ONLY)
    (tmp_path / "legacy.py").write_text(LEGACY)
    return tmp_path


def check(project, *args, env=None):
    return run_cli("check", "--static-only", *args, cwd=project, env=env)


# ---------------------------------------------------------------- fail-on


def test_info_findings_print_but_do_not_fail_by_default(project):
    r = check(project, "--output-format", "concise", "saliency.py")
    assert r.returncode == 0, r.stderr
    assert "saliency.py:4:36: HKL405 " in r.stdout
    assert 'Below `fail-on = "warning"`: none fails the run.' in r.stderr


def test_fail_on_from_the_option_the_configuration_and_inline(project):
    assert check(project, "--fail-on", "info", "saliency.py").returncode == 1
    assert check(project, "--config", 'fail-on = "info"', "saliency.py").returncode == 1
    assert check(project, "--fail-on", "error", "legacy.py").returncode == 0  # HKL101 is a warning
    assert check(project, "legacy.py").returncode == 1
    (project / "pyproject.toml").write_text('[tool.hooklint]\nfail-on = "info"\n')
    assert check(project, "saliency.py").returncode == 1
    assert check(project, "--fail-on", "warning", "saliency.py").returncode == 0  # the flag wins
    settings = check(project, "--show-settings", "saliency.py")
    assert 'fail-on = "info"' in settings.stdout
    (project / "pyproject.toml").write_text('[tool.hooklint]\nfail-on = "notice"\n')
    bad = check(project, "saliency.py")
    assert bad.returncode == 2 and bad.stderr.strip().endswith("`fail-on` must be one of error, warning, info")


def test_the_pre_commit_hook_respects_fail_on(project):
    """.pre-commit-hooks.yaml runs the CLI: an info finding does not block a commit."""
    import shlex

    import yaml

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    entry = shlex.split(next(h["entry"] for h in hooks if h["id"] == "hooklint"))[1:]
    assert run_cli(*entry, "saliency.py", cwd=project).returncode == 0
    assert run_cli(*entry, "legacy.py", cwd=project).returncode == 1


def test_show_settings_names_fail_on_and_the_project(project):
    r = check(project, "--show-settings", "legacy.py")
    assert 'fail-on = "warning"' in r.stdout and "static-only = false" in r.stdout
    assert "Cross-file callers from:" in r.stdout


# ---------------------------------------------------------------- --config KEY=VALUE


def test_inline_config_values_are_toml_and_repeatable(project):
    r = check(project, "--config", 'select = ["HKL405"]', "--config", 'fail-on = "info"', "--output-format",
              "concise", ".")
    assert r.returncode == 1 and "HKL405" in r.stdout and "HKL101" not in r.stdout, r.stdout + r.stderr
    (project / "alt.toml").write_text('select = ["HKL101"]\n')
    r = check(project, "--config", "alt.toml", "--output-format", "concise", ".")
    assert "HKL101" in r.stdout and "HKL405" not in r.stdout
    r = check(project, "--config", "alt.toml", "--config", "fail-on = 'error'", "legacy.py")
    assert r.returncode == 0  # the file's select, the inline fail-on


@pytest.mark.parametrize(("value", "says"), [
    ("select = [HKL1]", "not a file, nor a TOML `key = value`"),
    ("colour = true", "unknown key `colour`"),
    ('fail-on = "sometimes"', "`fail-on` must be one of error, warning, info"),
    ("nope.toml", "nope.toml: configuration file not found"),
])
def test_bad_inline_config_is_one_line_and_exit_2(project, value, says):
    r = check(project, "--config", value, "legacy.py")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr


# ---------------------------------------------------------------- colour


def test_color_option_and_the_environment(project):
    no_env = {"NO_COLOR": "", "FORCE_COLOR": ""}
    assert ANSI not in check(project, "--output-format", "concise", "legacy.py", env=no_env).stdout  # a pipe
    assert ANSI in check(project, "--output-format", "concise", "legacy.py",
                         env={"NO_COLOR": "", "FORCE_COLOR": "1"}).stdout
    assert ANSI not in check(project, "--output-format", "concise", "legacy.py",
                             env={"NO_COLOR": "1", "FORCE_COLOR": "1"}).stdout  # NO_COLOR wins
    assert ANSI in check(project, "--color", "always", "--output-format", "concise", "legacy.py",
                         env={"NO_COLOR": "1"}).stdout  # the option wins over the environment
    assert ANSI not in check(project, "--color", "never", "legacy.py", env={"NO_COLOR": "", "FORCE_COLOR": "1"}).stdout
    full = check(project, "--color", "always", "legacy.py")
    assert ANSI in full.stdout
    (project / "legacy.py").write_text(LEGACY.replace("(log)\n", "(log)  # noqa: HKL999\n"))
    notices = check(project, "--color", "always", "legacy.py")  # the unknown code's warning, on stderr
    assert f"hooklint: {ANSI}33mwarning" in notices.stderr, notices.stderr


def test_color_only_in_the_text_formats(project):
    r = check(project, "--color", "always", "--output-format", "json", "legacy.py")
    assert ANSI not in r.stdout and json.loads(r.stdout)[0]["code"] == "HKL101"


# ---------------------------------------------------------------- fixes


def test_fix_only_applies_fixes_and_reports_nothing_else(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(STALE_NOQA)
    r = run_cli("check", "--static-only", "--extend-select", "HKL003", "--fix-only", "model.py", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "" and "Fixed 1 finding." in r.stderr and "HKL101" not in r.stderr
    assert path.read_text() == STALE_NOQA.replace("  # noqa: HKL101", "")  # the legacy hook is still there
    again = run_cli("check", "--static-only", "--extend-select", "HKL003", "--fix-only", "model.py", cwd=tmp_path)
    assert again.returncode == 0 and "No fixes applied." in again.stderr


def test_exit_non_zero_on_fix(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(STALE_NOQA)
    r = run_cli("check", "--static-only", "--extend-select", "HKL003", "--fix-only", "--exit-non-zero-on-fix",
                "model.py", cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == "", r.stdout + r.stderr
    # --fix: nothing left to report after the fix, still 1 because a file changed
    path.write_text(STALE_NOQA.replace("layer.register_backward_hook(log)\n", ""))
    r = run_cli("check", "--static-only", "--select", "HKL003,HKL101", "--fix", "--exit-non-zero-on-fix", "model.py",
                cwd=tmp_path)
    assert r.returncode == 1 and "All checks passed" in r.stderr and "noqa" not in path.read_text(), r.stderr
    r = run_cli("check", "--static-only", "--select", "HKL003,HKL101", "--fix", "--exit-non-zero-on-fix", "model.py",
                cwd=tmp_path)
    assert r.returncode == 0  # nothing fixed this time
    bad = run_cli("check", "--exit-non-zero-on-fix", "model.py", cwd=tmp_path)
    assert bad.returncode == 2 and "use it with --fix or --fix-only" in bad.stderr


def test_ignore_noqa(tmp_path):
    (tmp_path / "model.py").write_text(LEGACY.replace("(log)\n", "(log)  # noqa: HKL101\n"))
    assert run_cli("check", "--static-only", "model.py", cwd=tmp_path).returncode == 0
    r = run_cli("check", "--static-only", "--ignore-noqa", "--output-format", "concise", "model.py", cwd=tmp_path)
    assert r.returncode == 1 and "model.py:7:7: HKL101" in r.stdout, r.stdout + r.stderr
    # the cache keeps the two apart
    assert run_cli("check", "--static-only", "model.py", cwd=tmp_path).returncode == 0


def test_unused_noqa_rule_from_the_cli(tmp_path):
    (tmp_path / "model.py").write_text(STALE_NOQA)
    default = run_cli("check", "--static-only", "--output-format", "concise", "model.py", cwd=tmp_path)
    assert "HKL003" not in default.stdout  # off by default
    r = run_cli("check", "--static-only", "--extend-select", "HKL003", "--output-format", "concise", "model.py",
                cwd=tmp_path)
    assert "model.py:9:41: HKL003 [*] `# noqa` names HKL101, but no finding of that code starts on this line" \
        in r.stdout, r.stdout


# ---------------------------------------------------------------- version, clean


def test_version():
    from hooklint import __version__

    sub = run_cli("version")
    flag = run_cli("--version")
    assert sub.returncode == flag.returncode == 0
    assert sub.stdout == flag.stdout == f"hooklint {__version__}\n"


def test_clean_removes_only_the_folders_hooklint_tagged(project):
    assert check(project, "legacy.py").returncode == 1
    assert (project / ".hooklint_cache" / "CACHEDIR.TAG").is_file()
    nested = project / "pkg" / ".hooklint_cache"
    nested.mkdir(parents=True)
    (nested / "CACHEDIR.TAG").write_text((project / ".hooklint_cache" / "CACHEDIR.TAG").read_text())
    foreign = project / "other_cache"
    foreign.mkdir()
    (foreign / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n# created by another tool\n")
    untagged = project / "data" / ".hooklint_cache"
    untagged.mkdir(parents=True)
    (untagged / "keep.txt").write_text("not ours")
    r = run_cli("clean", cwd=project)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["Removed .hooklint_cache", "Removed pkg/.hooklint_cache"]
    assert not (project / ".hooklint_cache").exists() and not nested.exists()
    assert foreign.is_dir() and (untagged / "keep.txt").is_file()
    again = run_cli("clean", cwd=project)
    assert again.returncode == 0 and again.stdout == "" and "No hooklint cache to remove." in again.stderr


def test_clean_honours_the_configured_cache_dir(project):
    (project / "pyproject.toml").write_text('[tool.hooklint]\ncache-dir = "build/lint-cache"\n')
    check(project, "legacy.py")
    assert (project / "build" / "lint-cache" / "CACHEDIR.TAG").is_file()
    r = run_cli("clean", cwd=project)
    assert r.stdout == "Removed build/lint-cache\n" and not (project / "build" / "lint-cache").exists()


# ---------------------------------------------------------------- what is printed


def test_concise_and_output_file_print_the_closing_line_only(project):
    concise = check(project, "--output-format", "concise", "legacy.py")
    assert concise.stderr.splitlines() == ["Found 1 finding in 1 file (1 checked). 1 more with `--unsafe-fixes`."]
    out = project / "findings.txt"
    to_file = check(project, "-o", str(out), "legacy.py")
    assert to_file.stdout == "" and "HKL101" in out.read_text()
    assert to_file.stderr.splitlines() == concise.stderr.splitlines()
    full = check(project, "legacy.py")
    assert "code    rule" in full.stderr  # the table by rule follows the full format


# ---------------------------------------------------------------- --watch


class Lines:
    """What a stream of a process that never ends by itself printed, read by a thread."""

    def __init__(self, stream):
        import threading

        self.lines: list[str] = []
        self.taken = 0
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    def until(self, needle: str, deadline: float) -> str:
        """The lines printed since the last call, up to the first that contains ``needle``."""
        while True:
            for i in range(self.taken, len(self.lines)):
                if needle in self.lines[i]:
                    text = "".join(self.lines[self.taken:i + 1])
                    self.taken = i + 1
                    return text
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} not printed in time; got:\n{''.join(self.lines[self.taken:])}")
            time.sleep(0.05)


def test_watch_checks_again_when_a_file_changes(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(LEGACY)
    env = dict(os.environ, NO_COLOR="1", HOOKLINT_WATCH_INTERVAL="0.2")
    env.pop("FORCE_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "hooklint", "check", "--static-only", "--watch",
                             "--output-format", "concise", "model.py"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        deadline = time.monotonic() + 60
        assert "model.py:7:7: HKL101" in out.until("HKL101", deadline)
        err.until("watching 1 file for changes", deadline)
        path.write_text(LEGACY + "layer.register_backward_hook(log)\n")
        err.until("model.py changed: checking again", deadline)
        assert "model.py:7:7: HKL101" in out.until("model.py:8:7: HKL101", deadline)
        path.write_text("x = 1\n")
        err.until("All checks passed", deadline)
        assert proc.poll() is None  # still watching
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_watch_refuses_stdin():
    r = run_cli("check", "--watch", "-", input="x = 1\n")
    assert r.returncode == 2 and "--watch" in r.stderr
