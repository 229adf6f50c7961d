"""`hooklint graph` and the graph options of `hooklint check`, as users run them."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES, run_cli
from hooklint.cli import main
from hooklint.graph import provider

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


@pytest.fixture
def project(tmp_path):
    shutil.copy(FIXTURES / "models" / "legacy_hooks.py", tmp_path / "legacy_hooks.py")
    shutil.copy(FIXTURES / "models" / "untraceable.py", tmp_path / "untraceable.py")
    (tmp_path / "plain.py").write_text("print('no model here')\n", encoding="utf-8")
    return tmp_path


def test_graph_table(project):
    proc = run_cli("graph", "legacy_hooks.py", "untraceable.py", "plain.py", cwd=project)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for header in ("module", "class", "ops", "legacy hook binds to", "legacy-safe", "full hook before param grads"):
        assert header in out
    assert "MyNet: built with MyNet() (line 32); traced with torch.fx; example input float32[2, 4] derived from " \
           "f1 (Linear, in_features=4)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("    ")}
    assert rows["f2"][:5] == ["f2", "MyMean", "1", "DivBackward0", "(line"]
    assert rows["f2"][-5:] == ["MyMean.forward)", "yes", "-", "(no", "parameters)"]
    assert rows["f1"][-2:] == ["no", "yes"]
    assert "Gated: built with a no-argument constructor; analysed by running a forward and walking grad_fn " \
           "(fx could not trace it: TraceError: symbolically traced variables cannot be used as inputs to " \
           "control flow)" in out
    assert "hooklint: info: plain.py: nothing to analyse" in proc.stderr
    assert "hooklint: info: untraceable.py: graph: Gated analysed by running a forward" in proc.stderr


def test_graph_json_then_from_the_cache(project):
    first = run_cli("graph", "legacy_hooks.py", "untraceable.py", "--output-format", "json", cwd=project)
    assert first.returncode == 0, first.stderr
    data = json.loads(first.stdout)
    files = {f["path"]: f for f in data["files"]}
    assert set(files) == {"legacy_hooks.py", "untraceable.py"} and not files["legacy_hooks.py"]["cached"]
    net = next(m for m in files["legacy_hooks.py"]["models"] if m["class_name"] == "MyNet")
    root = net["modules"][0]
    assert root["path"] == "" and root["bound"]["name"] == "DivBackward0" and root["legacy_safe"] is False
    assert [op["name"] for op in root["ops"]] == ["TBackward0", "AddmmBackward0", "DivBackward0"]
    assert root["full_hook_before_param_grads"] == "yes"
    gated = files["untraceable.py"]["models"][0]
    assert gated["method"] == "autograd" and "control flow" in gated["fx_error"]
    assert [n["filename"] for n in data["notices"]] == ["untraceable.py"]
    again = json.loads(run_cli("graph", "legacy_hooks.py", "--output-format", "json", cwd=project).stdout)
    assert again["files"][0]["cached"] is True
    assert again["files"][0]["models"] == files["legacy_hooks.py"]["models"]


def test_check_uses_the_graph(project):
    proc = run_cli("check", "legacy_hooks.py", "--output-format", "json", cwd=project)
    assert proc.returncode == 1, proc.stderr
    by_code = {f["code"]: f for f in json.loads(proc.stdout) if f["location"]["row"] == 33}
    assert by_code["HKL102"]["origin"] == "graph"
    assert "it binds to DivBackward0 (`return input / 4`, line 15 in MyMean.forward)" in by_code["HKL102"]["message"]
    assert not [f for f in json.loads(proc.stdout) if f["code"] == "HKL102" and f["location"]["row"] == 36]


def test_check_static_only_never_runs_the_graph_layer(project, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("--static-only must not import or run user code")

    monkeypatch.setattr(provider, "provide_graph_facts", refuse)
    code = main(["check", str(project / "legacy_hooks.py"), "--static-only", "--output-format", "concise"])
    assert code == 1
    assert "HKL102" in capsys.readouterr().out


def test_without_torch_check_says_so_once_and_graph_refuses(project, monkeypatch, capsys):
    monkeypatch.setattr(provider, "torch_version", lambda: None)
    code = main(["check", str(project / "legacy_hooks.py"), str(project / "untraceable.py"),
                 "--output-format", "concise"])
    err = capsys.readouterr().err
    assert code == 1  # the static findings
    skipped = [line for line in err.splitlines() if "graph analysis skipped" in line]
    assert skipped == [f"hooklint: info: {project / 'legacy_hooks.py'}: graph analysis skipped (2 model files): "
                       f"torch is not installed (pip install 'hooklint[torch]'); static rules only"]
    assert main(["graph", str(project / "legacy_hooks.py")]) == 2
    assert "`hooklint graph` needs torch (pip install 'hooklint[torch]')" in capsys.readouterr().err


def test_timeout_must_be_positive(project):
    proc = run_cli("check", "legacy_hooks.py", "--timeout", "0", cwd=project)
    assert proc.returncode == 2 and "the timeout must be a positive, finite number of seconds" in proc.stderr


def test_no_graph_analysis_when_no_enabled_rule_reads_the_graph(project, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("no enabled rule needs the graph: no model may be imported")

    monkeypatch.setattr(provider, "provide_graph_facts", refuse)
    code = main(["check", str(project / "legacy_hooks.py"), "--select", "HKL101", "--output-format", "concise"])
    assert code == 1 and "HKL101" in capsys.readouterr().out


# ---------------------------------------------------------------- saying when the user's code runs

def test_a_run_that_imports_code_says_so_first_and_once(project):
    cold = run_cli("check", "legacy_hooks.py", "untraceable.py", "--output-format", "concise", cwd=project)
    lines = cold.stderr.splitlines()
    assert lines[0].startswith("hooklint: importing your code (legacy_hooks.py, untraceable.py) to trace its "
                               "models with torch"), cold.stderr
    assert "`--static-only` or `static-only = true` in [tool.hooklint] turns this off" in lines[0]
    assert sum("hooklint: importing" in line for line in lines) == 1
    # from the cache: nothing is imported, nothing to say
    warm = run_cli("check", "legacy_hooks.py", "untraceable.py", "--output-format", "concise", cwd=project)
    assert "hooklint: importing" not in warm.stderr and warm.stdout == cold.stdout
    quiet = run_cli("check", "legacy_hooks.py", "--no-cache", "-q", cwd=project)
    assert "importing" not in quiet.stderr and "HKL102" in quiet.stdout


def test_static_only_in_the_configuration(project, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("`static-only = true` must not import or run user code")

    (project / "hooklint.toml").write_text("static-only = true\n")
    monkeypatch.setattr(provider, "provide_graph_facts", refuse)
    code = main(["check", str(project / "legacy_hooks.py"), "--output-format", "concise"])
    captured = capsys.readouterr()
    assert code == 1 and "HKL102" in captured.out and "importing" not in captured.err


def test_progress_on_request_never_with_a_machine_format(project):
    shown = run_cli("check", "legacy_hooks.py", "untraceable.py", "--progress", "--no-cache",
                    "--output-format", "concise", cwd=project)
    assert "hooklint: graph 1/2: importing legacy_hooks.py" in shown.stderr
    assert "hooklint: graph 2/2: importing untraceable.py" in shown.stderr
    machine = run_cli("check", "legacy_hooks.py", "--progress", "--no-cache", "--output-format", "json",
                      cwd=project)
    assert "graph 1/1" not in machine.stderr and json.loads(machine.stdout)
    plain = run_cli("check", "legacy_hooks.py", "--no-cache", "--output-format", "concise", cwd=project)
    assert "graph 1/1" not in plain.stderr  # not a terminal, no --progress


def test_a_warm_run_says_the_cached_graph_notes_once(project):
    cold = run_cli("check", "untraceable.py", "legacy_hooks.py", "--output-format", "concise", cwd=project)
    assert "hooklint: info: untraceable.py: graph: Gated analysed by running a forward" in cold.stderr
    warm = run_cli("check", "untraceable.py", "legacy_hooks.py", "--output-format", "concise", cwd=project)
    assert "Gated analysed by running a forward" not in warm.stderr
    notes = [line for line in warm.stderr.splitlines() if "graph:" in line]
    assert notes == ["hooklint: info: untraceable.py: graph: from the cache, models of 1 file (untraceable.py) "
                     "analysed without a full fx trace or not at all, as said when they were analysed "
                     "(`hooklint graph FILE` shows them; --no-cache analyses again)"], warm.stderr


def test_progress_on_a_terminal_is_one_line_rewritten(project):
    """stderr a terminal (a pseudo-terminal here): the line is rewritten in
    place and erased at the end, without --progress."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.Popen([sys.executable, "-m", "hooklint", "check", "--no-cache", "--output-format", "concise",
                             "legacy_hooks.py", "untraceable.py"], cwd=project, env=env, stdout=subprocess.PIPE,
                            stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        seen += chunk
    proc.stdout.read()
    proc.wait(timeout=120)
    os.close(master)
    text = seen.decode()
    assert "\r\x1b[Khooklint: graph 1/2: importing legacy_hooks.py" in text, text
    assert "\r\x1b[Khooklint: graph 2/2: importing untraceable.py" in text, text
    assert text.index("hooklint: importing your code") < text.index("graph 1/2")  # the notice comes first
