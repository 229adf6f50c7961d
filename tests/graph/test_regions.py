"""`hooklint graph` says which modules run inside an activation-checkpointed
region and which run in code the model compiles itself ("runs in" column,
`compiled` / `checkpointed` in the JSON; docs/compile.md)."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

CHECKPOINTED = """
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(8, 8)
        self.mlp = nn.Linear(8, 8)

    def forward(self, x):
        return self.mlp(torch.tanh(self.attn(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        for block in self.blocks[:1]:
            x = checkpoint(block, x, use_reentrant=False)
        x = checkpoint(self.blocks[1], x, use_reentrant=True)
        return self.head(x)
"""

WRAPPED_AND_COMPILED = """
import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(8, 8)
        self.body = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), backend="aot_eager")
        self.tail = checkpoint_wrapper(nn.Sequential(nn.Linear(8, 8), nn.Tanh()))

    def forward(self, x):
        return self.tail(self.body(self.stem(x)))
"""


def _modules(payload: dict, name: str) -> dict[str, dict]:
    model = next(m for f in payload["files"] for m in f["models"] if m["class_name"] == name)
    return {m["path"]: m for m in model["modules"]}


def test_checkpointed_modules_in_json_and_table(write, tmp_path):
    write("net.py", CHECKPOINTED)
    result = run_cli("graph", "net.py", "--no-cache", "--output-format", "json", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    modules = _modules(json.loads(result.stdout), "Net")
    where = {path: m["checkpointed"] for path, m in modules.items()}
    assert where == {"": "", "blocks": "", "blocks.0": "non-reentrant", "blocks.0.attn": "non-reentrant",
                     "blocks.0.mlp": "non-reentrant", "blocks.1": "reentrant", "blocks.1.attn": "reentrant",
                     "blocks.1.mlp": "reentrant", "head": ""}
    assert not any(m["compiled"] for m in modules.values())
    table = run_cli("graph", "net.py", "--no-cache", cwd=tmp_path, timeout=300).stdout
    assert "runs in" in table
    row = next(line for line in table.splitlines() if line.strip().startswith("blocks.1.attn"))
    assert row.rstrip().endswith("checkpoint (reentrant)")
    head = next(line for line in table.splitlines() if line.strip().startswith("head "))
    assert "checkpoint" not in head


def test_wrapped_and_compiled_submodules(write, tmp_path):
    write("encoder.py", WRAPPED_AND_COMPILED)
    result = run_cli("graph", "encoder.py", "--no-cache", "--output-format", "json", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    modules = _modules(json.loads(result.stdout), "Encoder")
    assert {p for p, m in modules.items() if m["compiled"]} == {"body", "body._orig_mod", "body._orig_mod.0",
                                                                "body._orig_mod.1"}
    assert {p for p, m in modules.items() if m["checkpointed"]} == {
        "tail._checkpoint_wrapped_module", "tail._checkpoint_wrapped_module.0", "tail._checkpoint_wrapped_module.1"}


def test_no_column_for_a_model_without_either(write, tmp_path):
    write("plain.py", "import torch.nn as nn\n\nclass Plain(nn.Module):\n    def __init__(self):\n"
                      "        super().__init__()\n        self.fc = nn.Linear(2, 2)\n\n"
                      "    def forward(self, x):\n        return self.fc(x)\n")
    table = run_cli("graph", "plain.py", "--no-cache", cwd=tmp_path, timeout=300).stdout
    assert "runs in" not in table and "Plain" in table
