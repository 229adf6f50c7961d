"""No model file can change another file's facts, proofs or cache entries.

`a_poison.py` sets torch's default dtype, replaces `nn.Linear.forward` and
makes `register_full_backward_hook` register a legacy hook, all in a class
body (which runs when hooklint imports the definitions).  In a worker shared
by every file, `b_victim.py` (analysed after it) got other ops and input
dtypes, its failing proof said "verified", and the cache kept those facts
after `a_poison.py` was deleted.  Each file now runs in a process of its own
(hooklint.sandbox.zygote)."""

from __future__ import annotations

import json

import pytest

from security.conftest import hooklint, write_files

pytestmark = [pytest.mark.torch, pytest.mark.slow]

POISON = '''
import torch
import torch.nn as nn


class Poison(nn.Module):
    torch.set_default_dtype(torch.float64)
    nn.Linear.forward = lambda self, x: x * 2
    nn.Module.register_full_backward_hook = nn.Module.register_backward_hook

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.fc.register_backward_hook(self.hook)

    def hook(self, module, grad_input, grad_output):
        return None

    def forward(self, x):
        return self.fc(x)
'''

VICTIM = '''
import torch
import torch.nn as nn


def backward_hook(module, gin, gout):  # written for nn.Linear's legacy grad_input
    gin0, gin1, gin2 = gin
    return gin0, gin1 * 2, gin2 * 3


class Victim(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 8)
        self.out = nn.Linear(8, 2)
        self.layer.register_backward_hook(backward_hook)

    def forward(self, x):
        return self.out(torch.tanh(self.layer(x)))
'''


def _files(run) -> dict:
    assert run.returncode in (0, 1), run.stderr
    return {f["path"]: f for f in json.loads(run.stdout)["files"]}


def _facts(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k != "cached"}


def _verdict(run, name: str) -> list[str]:
    return [line.split(": ", 2)[2] for line in run.stderr.splitlines() if f": {name}: HKL101 fix" in line]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("isolation")
    write_files(folder, {"pyproject.toml": "[tool.hooklint]\n", "a_poison.py": POISON, "b_victim.py": VICTIM})
    env: dict[str, str] = {}
    proof = ("check", "--select", "HKL101", "--diff", "--unsafe-fixes", "--verify")
    out = {
        "together": hooklint("graph", ".", "--output-format", "json", cwd=folder, env=env),
        "proof together": hooklint(*proof, ".", cwd=folder, env=env),
    }
    (folder / "a_poison.py").unlink()
    out["cached alone"] = hooklint("graph", ".", "--output-format", "json", cwd=folder, env=env)
    out["alone"] = hooklint("graph", ".", "--no-cache", "--output-format", "json", cwd=folder, env=env)
    out["proof alone"] = hooklint(*proof, "--no-cache", ".", cwd=folder, env=env)
    return out


def test_the_poison_ran_in_its_own_process(runs):
    ops = [op["name"] for op in _files(runs["together"])["a_poison.py"]["models"][0]["modules"][0]["ops"]]
    assert ops == ["MulBackward0"], ops  # its patched nn.Linear.forward


def test_the_other_file_gets_the_facts_it_gets_alone(runs):
    together, alone = _files(runs["together"])["b_victim.py"], _files(runs["alone"])["b_victim.py"]
    model = alone["models"][0]
    assert model["inputs"] == [{"dtype": "float32", "shape": [2, 4]}]
    assert "AddmmBackward0" in [op["name"] for op in model["modules"][0]["ops"]]
    assert _facts(together) == _facts(alone)


def test_deleting_the_poison_leaves_no_wrong_cached_facts(runs):
    cached = _files(runs["cached alone"])["b_victim.py"]
    assert cached["cached"] is True
    assert _facts(cached) == _facts(_files(runs["alone"])["b_victim.py"])


def test_the_other_files_failing_proof_still_fails(runs):
    together, alone = _verdict(runs["proof together"], "b_victim.py"), _verdict(runs["proof alone"], "b_victim.py")
    assert len(alone) == 1 and "not applied: its proof failed" in alone[0], runs["proof alone"].stderr
    assert together == alone
    assert "b_victim.py" not in runs["proof together"].stdout  # no diff for it


def test_one_worker_process_per_file_isolates_too(tmp_path, monkeypatch, runs):
    """Where forking is not safe (not Linux), each file gets a worker process of its own."""
    from hooklint.config import Config
    from hooklint.graph.provider import GraphRun, provide_graph_facts

    write_files(tmp_path, {"pyproject.toml": "[tool.hooklint]\n", "a_poison.py": POISON, "b_victim.py": VICTIM})
    monkeypatch.setenv("HOOKLINT_ISOLATION", "process")
    run = GraphRun()
    facts, _ = provide_graph_facts([str(tmp_path / "a_poison.py"), str(tmp_path / "b_victim.py")],
                                   Config(root=tmp_path), use_cache=False, run=run)
    assert run.workers_started == 2
    victim = facts[str(tmp_path / "b_victim.py")].models[0]
    alone = _files(runs["alone"])["b_victim.py"]["models"][0]
    assert [op.name for op in victim.modules[0].ops] == [op["name"] for op in alone["modules"][0]["ops"]]
    assert [(s.dtype, list(s.shape)) for s in victim.inputs] == [("float32", [2, 4])]
