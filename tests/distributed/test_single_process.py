"""The run-time checks in this process, on a one-rank gloo group: DDP and FSDP2
work with one rank, and what HKL602/HKL603 rest on (DDP writes its bucket back
into `.grad`, FSDP2 replaces the parameters) does not need a second rank.
Fast, so the rules' logic is tested on every run; the 2-rank tests show the rest."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture
def one_rank(tmp_path):
    if dist.is_initialized():  # pragma: no cover - another test left one
        dist.destroy_process_group()
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def _train(model, steps=2, requires_grad=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(steps):
            torch.manual_seed(step)
            model(torch.rand(3, 4, requires_grad=requires_grad)).sum().backward()


def zero_row(module, grad_input, grad_output):
    if module.weight.grad is not None:
        module.weight.grad[0] = 0


def halve_grad(param):
    param.grad.mul_(0.5)


def test_ddp_overwrites_a_module_hook_edit(one_rank):
    import hooklint
    from torch.nn.parallel import DistributedDataParallel as DDP

    with hooklint.instrument(select=["HKL6"]) as session:
        model = _model()
        model[2].register_full_backward_hook(zero_row)
        ddp = DDP(model)
        _train(ddp)
    assert model[2].weight.grad[0].abs().sum() > 0  # DDP wrote the bucket back over the edit
    [finding] = session.findings
    assert finding.code == "HKL602"
    assert "wrote `.grad` of `model.2.weight`, a parameter DistributedDataParallel manages" in finding.message
    assert "the edit was lost" in finding.message


def test_ddp_parameter_hooks_and_no_sync_stay_quiet(one_rank):
    import hooklint
    from torch.nn.parallel import DistributedDataParallel as DDP

    with hooklint.instrument(select=["ALL"]) as session:
        model = _model()
        model[0].weight.register_hook(lambda grad: grad * 0.5)
        model[2].weight.register_post_accumulate_grad_hook(halve_grad)
        ddp = DDP(model)
        _train(ddp)
        with ddp.no_sync():
            _train(ddp, steps=1)
    assert session.findings == []


def test_ddp_module_hook_before_accumulation_gets_the_ddp_fix(one_rank):
    """HKL201 under DDP: the help names the hooks DDP keeps."""
    import hooklint
    from torch.nn.parallel import DistributedDataParallel as DDP

    with hooklint.instrument(select=["HKL2", "HKL6"]) as session:
        model = _model()
        model[0].register_full_backward_hook(zero_row)  # its input needs no grad: it runs too early
        ddp = DDP(model)
        _train(ddp, steps=3)
    assert {f.code for f in session.findings} == {"HKL201"}, [(f.code, f.message) for f in session.findings]
    assert all("Both run before DDP's all-reduce" in f.help for f in session.findings)


def test_fsdp2_parameter_tensor_hooks_never_run(one_rank):
    import hooklint
    from torch.distributed.fsdp import fully_shard

    calls = []
    with hooklint.instrument(select=["ALL"]) as session:
        model = _model()
        model[0].weight.register_hook(lambda grad: calls.append("before"))
        fully_shard(model[0])
        fully_shard(model)
        model[2].weight.register_hook(lambda grad: calls.append("after"))
        _train(model)
    assert calls == []
    found = sorted((f.code, "before `fully_shard`" in f.message) for f in session.findings)
    assert found == [("HKL603", False), ("HKL603", True)], [f.message for f in session.findings]
    assert all("Register `param.register_post_accumulate_grad_hook(fn)` on the sharded parameter" in f.help
               for f in session.findings)


def test_fsdp2_post_accumulate_hook_after_fully_shard_is_clean(one_rank):
    """The fix, and no HKL503 for the unsharded parameters whose `.grad` FSDP moves."""
    import hooklint
    from torch.distributed.fsdp import fully_shard

    seen = []
    with hooklint.instrument(select=["ALL"]) as session:
        model = _model()
        fully_shard(model[0])
        fully_shard(model)
        for param in model.parameters():
            param.register_post_accumulate_grad_hook(lambda p: seen.append(type(p.grad).__name__))
        _train(model)
    assert seen == ["DTensor"] * 8
    assert session.findings == []


def test_fsdp2_module_hook_reading_a_sharded_grad(one_rank):
    import hooklint
    from torch.distributed.fsdp import fully_shard

    def read(module, grad_input, grad_output):
        read.seen.append(module.weight.grad is None)

    read.seen = []
    with hooklint.instrument(select=["HKL6"]) as session:
        model = _model()
        model[0].register_full_backward_hook(read)
        fully_shard(model[0])
        fully_shard(model)
        _train(model)
    assert read.seen == [True, False]
    [finding] = session.findings
    assert finding.code == "HKL602" and "while FSDP2 held it sharded" in finding.message


def test_without_process_group_nothing_changes():
    """The extension is installed with every session: a program without
    torch.distributed runs and is judged as before."""
    import hooklint

    with hooklint.instrument(select=["ALL"]) as session:
        model = _model()
        model[2].register_full_backward_hook(zero_row)
        _train(model, requires_grad=True)
    assert session.findings == []
    assert model[2].weight.grad[0].abs().sum() == 0  # without DDP the edit holds


def test_fsdp_imported_after_the_session_started_is_observed(tmp_path):
    """FSDP is patched when the program imports it (an import hook), not before."""
    script = tmp_path / "late_import.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        import torch.distributed as dist
        import hooklint

        assert "torch.distributed.fsdp._fully_shard._fsdp_param" not in sys.modules
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        with hooklint.instrument(select=["HKL603"]) as session:
            from torch.distributed.fsdp import fully_shard
            model = torch.nn.Linear(4, 2)
            fully_shard(model)
            model.weight.register_hook(lambda g: g)
            model(torch.rand(3, 4)).sum().backward()
        print([f.code for f in session.findings])
        dist.destroy_process_group()
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "['HKL603']"
