"""`--verify` proves a fix by running what the user runs (hooklint.fix.entries,
hooklint.fix.program): the file's `__main__` block, a project script or a
pytest test that imports it, a `verify-entry` command; the original and the
fixed program run in the proof worker's sandbox, and where none can run the
notice says the fix was proven on the built model only, and why.

Real torch, tiny models; each test shares one project between its runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli

torch_tests = [pytest.mark.torch, pytest.mark.slow]

NET = '''\
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.layer(x))
'''

# the reviewer's case: the in-place op after the hooked layer is in a helper of another module
HELPERS = '''\
import torch


def step(model, x):
    out = model.layer(x)
    out.relu_()
    logits = model.head(out)
    logits.mul_(2)
    return logits.sum()
'''

TRAIN = '''\
import torch

from helpers import step
from models import Net

grads = []
input_grads = []


def save(module, grad_input, grad_output):
    grads.append(grad_output[0])


def save_input(module, grad_input, grad_output):
    input_grads.append(grad_input[0])


net = Net()
net.layer.register_backward_hook(save)
net.head.register_backward_hook(save_input)

if __name__ == "__main__":
    for _ in range(2):
        step(net, torch.randn(3, 4)).backward()
    print("ran", len(grads), len(input_grads))
'''


def hooklint(cwd, *args, **kw):
    return run_cli("check", "--select", "HKL101", *args, cwd=cwd, timeout=300, **kw)


def project(root: Path, files: dict[str, str], config: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text("[tool.hooklint]\n" + config)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def run_script(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, path.name], cwd=path.parent, capture_output=True, text=True, timeout=300)


def notices(r: subprocess.CompletedProcess) -> str:
    """The verdicts: stderr without the lines that announce the code hooklint imports or runs."""
    return "\n".join(line for line in r.stderr.splitlines()
                     if "importing your code" not in line and not line.startswith("hooklint: --verify runs"))


@pytest.mark.torch
@pytest.mark.slow
def test_the_rename_that_crashes_the_script_is_not_verified(tmp_path):
    root = project(tmp_path, {"models.py": NET, "helpers.py": HELPERS, "train.py": TRAIN})
    train = root / "train.py"
    assert run_script(train).stdout.strip() == "ran 2 2"
    # the built model alone does not reach the in-place op: HKL101 offers the rename, and without
    # --verify it is applied -- and the script then crashes in the helper
    hooklint(root, "--fix", "--unsafe-fixes", "train.py")
    assert "net.layer.register_full_backward_hook(save)" in train.read_text()
    crashed = run_script(train)
    assert crashed.returncode != 0
    assert "Output 0 of BackwardHookFunction is a view and is being modified inplace" in crashed.stderr
    train.write_text(TRAIN)

    r = hooklint(root, "--diff", "--verify", "--unsafe-fixes", "train.py")
    text = notices(r)
    assert train.read_text() == TRAIN
    # said before the user's program runs, as the graph layer says it imports code
    assert ("hooklint: --verify runs `train.py`'s __main__ block (and other programs that reach a fix) with and "
            "without each fix, confined as model code is") in r.stderr
    # `save` uses only grad_output: the output tensor hook is proven in the rename's place, and offered
    assert "-net.layer.register_backward_hook(save)" in r.stdout
    assert "+net.layer.register_forward_hook(output_grad_hook(save))" in r.stdout
    assert "register_full_backward_hook" not in r.stdout
    assert ("train.py: HKL101 fix at 19:11 changed to the output tensor hook, which is verified by running "
            "`train.py`'s __main__ block (the fix offered first failed its proof: `train.py`'s __main__ block fails "
            "with the fix: RuntimeError: Output 0 of BackwardHookFunction is a view and is being modified inplace. "
            "(helpers.py:6: out.relu_())): it runs as it does without the fix, and `save` receives the same "
            "grad_output in both of its calls (on Linear)") in text, text
    # `save_input` reads grad_input: no tensor hook can carry it, and the rename fails: nothing is offered
    assert ("train.py: HKL101 fix at 20:10 not applied: its proof failed: `train.py`'s __main__ block fails with "
            "the fix: RuntimeError: Output 0 of BackwardHookFunction is a view") in text, text
    assert "Would fix 1 finding in 1 file." in r.stderr

    # the verdicts are cached: with a torch that cannot be imported, the same answer
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('no torch in this test')\n")
    cached = hooklint(root, "--diff", "--verify", "--unsafe-fixes", "train.py",
                      env={"PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])})
    assert cached.stdout == r.stdout and notices(cached) == text
    # ... by the content of the modules the run imported: without the in-place op, the rename runs
    (root / "helpers.py").write_text(HELPERS.replace("out.relu_()", "out = out.relu()"))
    # (`save_input`'s rename still fails: `logits.mul_(2)` follows the head)
    again = hooklint(root, "--diff", "--verify", "--unsafe-fixes", "train.py")
    assert "+net.layer.register_full_backward_hook(save)" in again.stdout
    assert "train.py: HKL101 fix at 19:11 verified by running `train.py`'s __main__ block: it runs as it does " \
           "without the fix, and `save` receives the same grad_output in both of its calls (on Linear)" \
           in again.stderr, again.stderr
    (root / "helpers.py").write_text(HELPERS)

    # applied with --fix --verify, the script still runs and the hook still gets its gradients
    hooklint(root, "--fix", "--verify", "--unsafe-fixes", "train.py")
    assert "net.layer.register_forward_hook(output_grad_hook(save))" in train.read_text()
    ran = run_script(train)
    assert ran.returncode == 0 and ran.stdout.strip() == "ran 2 2", ran.stderr


ENTRY_CLASS = '''\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.layer(x)))


grads = []


def save(module, grad_input, grad_output):
    grads.append(grad_output[0])


net = Net()
net.layer.register_backward_hook(save)
'''


@pytest.mark.torch
@pytest.mark.slow
def test_an_entry_that_cannot_run_falls_back_to_the_built_model(tmp_path):
    root = project(tmp_path, {
        "data_main.py": ENTRY_CLASS + '\nif __name__ == "__main__":\n'
                                      '    net(torch.load("data/train.pt")).sum().backward()\n',
        "fetch_main.py": ENTRY_CLASS + '\nif __name__ == "__main__":\n'
                                       '    import urllib.request\n'
                                       '    urllib.request.urlopen("http://example.com/weights.pt").read()\n'
                                       '    net(torch.randn(2, 4)).sum().backward()\n',
        "slow_main.py": ENTRY_CLASS + '\nif __name__ == "__main__":\n'
                                      '    import time\n'
                                      '    time.sleep(120)\n',
    })
    r = hooklint(root, "--diff", "--verify", "--timeout", "8", ".")
    text = notices(r)
    built = ("the fixed code runs a forward and backward of Net() on float32[2, 4], and `save` receives the gradient "
             "of its output on `layer` (Linear)")
    assert ("data_main.py: HKL101 fix at 23:11 verified on the built model only (`data_main.py`'s __main__ block "
            "fails without the fix too: FileNotFoundError: [Errno 2] No such file or directory: 'data/train.pt' "
            "(data_main.py:26: net(torch.load(\"data/train.pt\")).sum().backward())): " + built) in text, text
    assert ("fetch_main.py: HKL101 fix at 23:11 verified on the built model only (`fetch_main.py`'s __main__ block "
            "fails in hooklint's sandbox without the fix too: Blocked: hooklint does not let model code open a URL "
            "('http://example.com/weights.pt') (fetch_main.py:27)): " + built) in text, text
    assert ("slow_main.py: HKL101 fix at 23:11 verified on the built model only (`slow_main.py`'s __main__ block "
            "did not finish within the 8 s timeout, without the fix too): " + built) in text, text
    assert "Would fix 3 findings in 3 files." in r.stderr


MODULE = ENTRY_CLASS + '''

def loss_of(x):
    return net(x).sum()
'''

TESTS = '''\
import torch

from model import loss_of, grads


def test_backward_reaches_the_hook():
    loss_of(torch.randn(3, 4)).backward()
    assert len(grads) == 1


def test_arithmetic():
    assert 1 + 1 == 2
'''

RUN_SCRIPT = '''\
import argparse

import torch

from pkg.model import net, grads

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
args = parser.parse_args()
for _ in range(args.steps):
    net(torch.randn(2, 4)).sum().backward()
assert len(grads) == args.steps
'''


@pytest.mark.torch
@pytest.mark.slow
def test_a_pytest_test_and_a_configured_entry(tmp_path):
    # the module has no entry of its own: the project's test that imports it is run
    root = project(tmp_path / "tested", {"model.py": MODULE, "tests/test_model.py": TESTS})
    r = hooklint(root, "--fix", "--verify", "model.py")
    assert ("model.py: HKL101 fix at 23:11 verified by running `pytest tests/test_model.py::"
            "test_backward_reaches_the_hook`: it runs as it does without the fix, and `save` receives the same "
            "grad_output in its one call (on Linear); on the built model too:") in r.stderr, r.stderr
    assert "net.layer.register_full_backward_hook(save)" in (root / "model.py").read_text()
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout

    # a command of `verify-entry` (its script needs arguments: its __main__ alone could not run)
    other = project(tmp_path / "configured", {"pkg/__init__.py": "", "pkg/model.py": ENTRY_CLASS,
                                              "scripts/run.py": RUN_SCRIPT},
                    'verify-entry = ["python -m scripts.run --steps 2"]\n')
    r = hooklint(other, "--diff", "--verify", "pkg/model.py")
    assert ("pkg/model.py: HKL101 fix at 23:11 verified by running `python -m scripts.run --steps 2` (verify-entry): "
            "it runs as it does without the fix, and `save` receives the same grad_output in both of its calls "
            "(on Linear)") in r.stderr, r.stderr

    # a module of a package with a __main__ block and a relative import: run as `python -m pkg.train`
    main = ENTRY_CLASS.replace("import torch.nn as nn\n", "import torch.nn as nn\n\nfrom .steps import STEPS\n") + (
        '\nif __name__ == "__main__":\n    for _ in range(STEPS):\n        net(torch.randn(2, 4)).sum().backward()\n')
    packaged = project(tmp_path / "packaged", {"pkg/__init__.py": "", "pkg/steps.py": "STEPS = 3\n",
                                               "pkg/train.py": main})
    r = hooklint(packaged, "--diff", "--verify", "pkg/train.py")
    assert ("verified by running `train.py`'s __main__ block (`python -m pkg.train`): it runs as it does without the "
            "fix, and `save` receives the same grad_output in all 3 of its calls (on Linear)") in r.stderr, r.stderr


def test_a_verify_entry_hooklint_cannot_run_is_a_configuration_error(tmp_path):
    root = project(tmp_path, {"model.py": "x = 1\n"}, 'verify-entry = "make train"\n')
    r = hooklint(root, "model.py")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "`verify-entry`: `make train` is not a Python command hooklint can run in its sandbox" in r.stderr


SANDBOXED = ENTRY_CLASS + '''

if __name__ == "__main__":
    import os
    import tempfile

    import helper

    # scratch is writable (and private to the run)
    with open(os.path.join(tempfile.gettempdir(), "marker-7d1c.txt"), "w") as handle:
        handle.write("written by the proof")
    # the project is not
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "out-7d1c.txt"), "w") as handle:
            handle.write("must not happen")
    except OSError:
        pass
    else:
        raise SystemExit("the project was writable")
    helper.run(net)
'''


@pytest.mark.torch
@pytest.mark.slow
def test_the_proof_writes_nothing_outside_scratch(tmp_path):
    root = project(tmp_path / "proj", {"model.py": SANDBOXED,
                                       "helper.py": "import torch\n\n\ndef run(net):\n"
                                                    "    net(torch.randn(2, 4)).sum().backward()\n"})

    def tree() -> dict[str, tuple[bytes, int]]:
        out = {}
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != ".hooklint_cache"]
            for name in files:
                path = os.path.join(folder, name)
                out[os.path.relpath(path, root)] = (Path(path).read_bytes(), os.stat(path).st_mtime_ns)
        return out

    before = tree()
    temp = tmp_path / "tmp"
    temp.mkdir()
    r = hooklint(root, "--diff", "--verify", "model.py", env={"TMPDIR": str(temp)})
    assert ("model.py: HKL101 fix at 23:11 verified by running `model.py`'s __main__ block: it runs as it does "
            "without the fix, and `save` receives the same grad_output in its one call") in r.stderr, r.stderr
    # the user's tree is byte for byte and time for time what it was: no fixed file, no bytecode, no output
    assert tree() == before
    # the scratch folders are gone, and what the program wrote there went with them
    assert list(temp.iterdir()) == []
    assert not [p for p in tmp_path.rglob("marker-7d1c.txt")]


# -- without torch: which programs, the probes, the comparison -----------------------------------------------


def test_verify_entry_commands():
    from hooklint.fix.entries import EntryError, parse_command

    root = Path("/project")
    script = parse_command("python train.py --epochs 1", root)
    assert (script.kind, script.target, script.args) == ("script", "/project/train.py", ("--epochs", "1"))
    assert script.label == "`python train.py --epochs 1` (verify-entry)"
    assert parse_command("train.py", root).kind == "script"
    module = parse_command("python3 -m pkg.train --steps 2", root)
    assert (module.kind, module.target, module.args) == ("module", "pkg.train", ("--steps", "2"))
    assert parse_command("pytest tests -k hook", root).args == ("tests", "-k", "hook")
    assert parse_command("python -m pytest tests", root).kind == "pytest"
    for bad in ["make train", "bash run.sh", "python -c 'print(1)'", "python -m", "python -m 'not a module'",
                "python 'unclosed"]:
        with pytest.raises(EntryError):
            parse_command(bad, root)


def _entries(root: Path, name: str, rows=(1, 1), **config):
    import ast
    from types import SimpleNamespace

    from hooklint.config import DEFAULT_EXCLUDES
    from hooklint.fix.entries import ProjectFiles, entries_for

    cfg = SimpleNamespace(root=root, verify_entry=config.get("verify_entry", []))
    path = root / name
    return entries_for(str(path), ast.parse(path.read_text()), rows, cfg,
                       ProjectFiles(root, list(DEFAULT_EXCLUDES)))


def test_entries_of_a_file(tmp_path):
    root = project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/model.py": "import torch.nn as nn\n\nnet = nn.Linear(2, 2)\n",
        "pkg/tests/__init__.py": "",
        "pkg/tests/test_rel.py": "from ..model import net\n\n\ndef test_uses():\n    net\n\n\n"
                                 "def test_other():\n    pass\n",
        "tests/test_model.py": "from pkg import model\n\n\ndef test_a():\n    model.net\n\n\n"
                               "class TestB:\n    def test_b(self):\n        model.net\n",
        "tests/test_fixture_only.py": "import pytest\nfrom pkg.model import net\n\n\n@pytest.fixture\n"
                                      "def n():\n    return net\n\n\ndef test_n(n):\n    pass\n",
        "tests/test_unrelated.py": "import model_of_someone_else\n\n\ndef test_x():\n    pass\n",
        "scripts/train.py": "from pkg.model import net\n\nif __name__ == '__main__':\n    net\n",
        "scripts/no_main.py": "from pkg.model import net\n",
        "script.py": "import torch\n\ndef main():\n    pass\n\nmain()\n",
        "lib.py": "import torch\n\nnet = torch.nn.Linear(2, 2)\nout = net(torch.ones(2))\n",
        ".venv/lib/test_vendored.py": "from pkg.model import net\n",
    })
    found = _entries(root, "pkg/model.py", verify_entry=["python -m pkg.run"])
    assert [e.label for e in found.entries] == [
        "`python -m pkg.run` (verify-entry)",
        "`scripts/train.py`'s __main__ block",
        "`pytest tests/test_model.py (2 tests)`",
        "`pytest pkg/tests/test_rel.py::test_uses`",
        "`pytest tests/test_fixture_only.py`",
    ]
    assert found.entries[2].args == ("tests/test_model.py::test_a", "tests/test_model.py::TestB::test_b")
    assert found.entries[4].args == ("tests/test_fixture_only.py",)
    # a script with top-level code that runs a model, a module that only builds one, nothing at all
    assert [e.label for e in _entries(root, "script.py").entries] == ["`script.py` (a script)"]
    assert _entries(root, "lib.py").entries == []
    assert "no `__main__` block" in _entries(root, "lib.py").none_because
    # a module of a package runs as `python -m` (its relative imports need the package)
    (root / "pkg" / "cli.py").write_text("from .model import net\n\nif __name__ == '__main__':\n    net\n")
    own_main = _entries(root, "pkg/cli.py").entries[0]
    assert (own_main.kind, own_main.target, own_main.label) == \
        ("module", "pkg.cli", "`cli.py`'s __main__ block (`python -m pkg.cli`)")
    # a test file is its own entry: the test holding the registration
    (root / "tests" / "test_hooks.py").write_text("def test_one():\n    x = 1\n\n\ndef test_two():\n    y = 2\n")
    own = _entries(root, "tests/test_hooks.py", rows=(6, 6)).entries[0]
    assert own.kind == "pytest" and own.args == ("tests/test_hooks.py::test_two",)


def test_the_probe_sits_inside_the_fix():
    from hooklint.fix.verify import _probed

    text = "net.layer.register_backward_hook(save)\n"
    start = text.index("save")
    hook = (start, start + 4, 0)
    assert _probed(text, [], [hook]) == "net.layer.register_backward_hook(__hooklint_probe__(0, save))\n"
    rename = [(text.index("register"), start - 1, "register_full_backward_hook")]
    assert _probed(text, rename, [hook]) == \
        "net.layer.register_full_backward_hook(__hooklint_probe__(0, save))\n"
    output_hook = [(text.index("register"), start - 1, "register_forward_hook"), (start, start, "output_grad_hook("),
                   (start + 4, start + 4, ")")]
    assert _probed(text, output_hook, [hook]) == \
        "net.layer.register_forward_hook(output_grad_hook(__hooklint_probe__(0, save)))\n"
    # a fix that rewrites the hook expression itself cannot be followed
    assert _probed(text, [(start, start + 4, "other")], [hook]) is None


def _run(counts, calls, returned=None, outcome="ok"):
    return {"outcome": outcome, "registered": {"0": 1}, "counts": {"0": counts}, "calls": {"0": calls},
            "returned": {"0": returned} if returned is not None else {}}


def _call(values, module="Linear"):
    return {"module": module, "grad_input": None,
            "grad_output": {"shape": [len(values)], "dtype": "float32", "sum": sum(values),
                            "abs": sum(abs(v) for v in values), "sample": values}}


def test_the_fixed_run_is_compared_with_the_original():
    from hooklint.fix.verify import judge_runs

    program = {"id": 0, "hook_name": "save", "row": 9}
    label = "`train.py`'s __main__ block"
    original = _run(2, [_call([1.0, 2.0]), _call([3.0, 4.0])])
    same = judge_runs(original, _run(2, [_call([1.0, 2.0]), _call([3.0, 4.0 + 1e-7])]), program, label)
    assert same.status == "verified" and same.hook_ran
    assert same.detail == ("it runs as it does without the fix, and `save` receives the same grad_output in both of "
                           "its calls (on Linear)")
    off = judge_runs(original, _run(2, [_call([1.0, 2.0]), _call([3.0, 4.5])]), program, label)
    assert off.status == "failed" and "in call 2 (Linear) is not the one it received before: values off by up " \
                                      "to 0.5" in off.detail
    fewer = judge_runs(original, _run(1, [_call([1.0, 2.0])]), program, label)
    assert fewer.status == "failed" and fewer.detail == "`save` runs 1 time when `train.py`'s __main__ block runs " \
                                                        "with the fix, 2 without it"
    failing = judge_runs(original, {"outcome": "error", "detail": "RuntimeError: boom (helpers.py:6)"}, program, label)
    assert failing.status == "failed" and failing.detail == \
        "`train.py`'s __main__ block fails with the fix: RuntimeError: boom (helpers.py:6)"
    slow = judge_runs(original, {"outcome": "timeout", "detail": "did not finish within the 5 s timeout"}, program,
                      label)
    assert slow.status == "unverified"
    # a hook that returns a value changes the gradients after it: only the calls up to there must match
    returning = judge_runs(_run(2, [_call([1.0]), _call([2.0])], returned=0),
                           _run(2, [_call([1.0]), _call([7.0])], returned=0), program, label)
    assert returning.status == "verified" and "the first 1 compared" in returning.detail
