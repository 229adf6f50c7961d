"""A damaged cache costs a miss, never a crash, a hang or a wrong verdict.

hooklint reads back what it wrote in `.hooklint_cache/` (static results,
graph facts).  Another tool, a full disk or a hostile commit can leave
anything there: truncated JSON, values of the wrong shape, JSON nested
deeper than the parser's recursion limit, a FIFO where a file was.  Each
damage below is applied to every cache file of a real run, and the next run
must print what a run without a cache prints."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from hooklint.fsutil import load_summed_json, write_summed_json
from tests.conftest import run_cli

MODEL = """\
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))

def hook(module, grad_input, grad_output):
    print(grad_input[0].shape)

net = Net()
net.fc.register_backward_hook(hook)
x = torch.ones(4, requires_grad=True)
x.register_hook(lambda g: g.mul_(2))
"""

OTHER = "import torch\nx = torch.ones(2, requires_grad=True)\nx.register_hook(lambda g: g * 2)\n"


def cache_files(project: Path) -> list[Path]:
    return sorted(p for p in (project / ".hooklint_cache").rglob("*.json"))


def mutate(value, rng: random.Random, depth: int = 0):
    """``value`` with one subtree replaced by a value of another shape."""
    wrong = [None, 0, -1, 2 ** 70, 1.5, "", "x", [], {}, [None] * 5, {"": None}, True]
    if depth > 0 and rng.random() < 0.3 or not isinstance(value, (dict, list)) or not value:
        return rng.choice(wrong)
    if isinstance(value, list):
        i = rng.randrange(len(value))
        return value[:i] + [mutate(value[i], rng, depth + 1)] + value[i + 1:]
    key = rng.choice(sorted(value))
    return {**value, key: mutate(value[key], rng, depth + 1)}


DAMAGES = {
    "truncated": lambda path, rng: path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2]),
    "too deep": lambda path, rng: path.write_text("[" * 100_000 + "]" * 100_000),
    "not utf-8": lambda path, rng: path.write_bytes(b"\xff\xfe" + path.read_bytes()),
    "a fifo": lambda path, rng: (path.unlink(), os.mkfifo(path)),
    # an edit: the content no longer matches its sum
    "edited": lambda path, rng: path.write_bytes(path.read_bytes().replace(b'"', b"'", 3)),
    # values of another shape under a valid sum (another hooklint's entry, a forged one)
    "wrong shape": lambda path, rng: write_summed_json(path, mutate(load_summed_json(path), rng)),
    "top-level list": lambda path, rng: write_summed_json(path, [1, 2, 3]),
    "plain json": lambda path, rng: path.write_text(json.dumps(load_summed_json(path))),
}


def result(project: Path, *args: str):
    proc = run_cli("check", "--output-format", "concise", *args, ".", cwd=project, timeout=180)
    return proc.returncode, proc.stdout, [line for line in proc.stderr.splitlines() if "internal error" in line]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged")
    (root / "model.py").write_text(MODEL)
    (root / "other.py").write_text(OTHER)
    return root


@pytest.fixture(scope="module")
def expected(project):
    code, out, errors = result(project, "--no-cache")
    assert code == 1 and "HKL101" in out and "HKL401" in out and not errors
    return code, out


@pytest.mark.torch
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_every_cache_file_damaged(project, expected, damage):
    result(project)  # write the cache (static results and graph facts)
    files = cache_files(project)
    assert any("static" in p.parts for p in files) and any("graph" in p.parts for p in files)
    rng = random.Random(damage)
    for path in files:
        DAMAGES[damage](path, rng)
    code, out, errors = result(project)
    assert (code, out) == expected and errors == []
    code, out, errors = result(project)  # and the run after, which rewrote the cache
    assert (code, out) == expected and errors == []


@pytest.mark.torch
@pytest.mark.parametrize("seed", range(6))
def test_one_wrong_value_deep_inside(project, expected, seed):
    """Each cache file in turn gets one value of the wrong shape somewhere."""
    result(project)
    rng = random.Random(seed)
    for path in cache_files(project):
        original = path.read_bytes()
        write_summed_json(path, mutate(load_summed_json(path), rng))
        code, out, errors = result(project, "-j", "1")
        assert (code, out) == expected and errors == [], path.relative_to(project)
        path.write_bytes(original)
