"""The static side: which module a wrap covers (no torch), and HKL201/HKL203
giving the fix that works under the engine the file shows."""

from __future__ import annotations

import pytest

from conftest import lint
from hooklint.static.distributed import covers


@pytest.mark.parametrize(("wrap", "target", "expected"), [
    ((), ("fc",), True),                                 # fully_shard(model) covers model.fc
    (("fc",), ("fc",), True),
    (("encoder",), ("head",), False),                    # fully_shard(model.encoder), a hook on model.head
    (("layers", "*"), ("layers", "0", "attn"), True),    # for layer in model.layers: fully_shard(layer)
    (("layers", "*"), ("head",), False),
    (("layers", "*"), ("**",), True),                    # some of model.parameters() are in the layers
    (("fc", "sub"), ("fc",), False),                     # a wrap below the hooked module does not cover it
    (("**",), ("fc",), True),                            # for m in model.modules(): fully_shard(m)
    (("0",), ("1",), False),
    (("*",), ("1",), True),
])
def test_covers(wrap, target, expected):
    assert covers(wrap, target) is expected


MODULE_HOOK = """
import torch.nn as nn
{imports}
model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
def zero_row(module, grad_input, grad_output):
    module.weight.grad[0] = 0
model[0].register_full_backward_hook(zero_row)
{wrap}
"""


@pytest.mark.parametrize(("imports", "wrap", "words"), [
    ("", "", "Hook the parameter instead"),
    ("from torch.nn.parallel import DistributedDataParallel as DDP", "ddp = DDP(model)",
     "Both run before DDP's all-reduce"),
    ("from torch.distributed.fsdp import fully_shard", "fully_shard(model)",
     "Under FSDP2 a parameter tensor hook never runs (HKL603)"),
    ("from torch.distributed.fsdp import fully_shard", "other = nn.Linear(2, 2)\nfully_shard(other)",
     "Hook the parameter instead"),  # the wrap does not cover the hooked module
])
def test_hkl201_help_follows_the_engine_the_file_shows(imports, wrap, words):
    [finding] = [f for f in lint(MODULE_HOOK.format(imports=imports, wrap=wrap), "HKL201")]
    assert words in finding.help, finding.help


def test_hkl203_help_under_ddp_and_fsdp2():
    source = """
    import torch.distributed as dist
    import torch.nn as nn
    {imports}
    model = nn.Linear(4, 2)
    def sync(param):
        dist.all_reduce(param)
    for param in model.parameters():
        param.register_post_accumulate_grad_hook(sync)
    {wrap}
    """
    [plain] = lint(source.format(imports="", wrap=""), "HKL203")
    [ddp] = lint(source.format(imports="from torch.nn.parallel import DistributedDataParallel",
                               wrap="ddp = DistributedDataParallel(model)"), "HKL203")
    [fsdp] = lint(source.format(imports="from torch.distributed.fsdp import fully_shard",
                                wrap="fully_shard(model)"), "HKL203")
    assert "Under DDP" not in plain.help and "FSDP2" not in plain.help
    assert ddp.help.startswith(plain.help) and "Under DDP the hook runs before the all-reduce" in ddp.help
    assert "Under FSDP2, `param.grad` is this rank's shard" in fsdp.help


def test_static_distributed_analysis_never_imports_torch():
    import subprocess
    import sys

    code = ("import sys\n"
            "import hooklint.static.distributed, hooklint.rules.grad_edit_races_allreduce, "
            "hooklint.rules.param_hook_under_fsdp, hooklint.rules.grads_diverge_across_ranks\n"
            "print('torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
