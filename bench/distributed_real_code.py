"""`hooklint run --nproc 2` on real distributed hook code: each scenario is a
training program written to a temporary folder and run on 2 ranks (gloo); the
script prints the findings (every one is a false positive to look at: these
programs are correct) and the time.

    python bench/distributed_real_code.py

- opacus (from the corpus cache, bench/corpus.py): DP-SGD under DDP with
  per-layer clipping, whose optimizer registers a tensor hook on every DDP
  parameter that clips, adds noise on rank 0 and sets `.grad` (the hook's return
  value is what DDP all-reduces); and opacus' own DPDDP with flat clipping (its
  optimizer all-reduces `.grad` in `step`).  Needs scipy (opacus' accountants);
  skipped with the reason otherwise.
- DDP with gradient accumulation under `no_sync()`, gradient clipping,
  `torch.nn.utils.prune` (forward pre-hooks) and a post-accumulate-grad mask.
- FSDP2 with a post-accumulate-grad mask on the sharded parameters, forward hooks
  for feature extraction and a full backward hook logging gradient norms of the
  output layer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import cache_dir  # noqa: E402

OPACUS = textwrap.dedent("""
    import sys, warnings
    sys.path.insert(0, OPACUS_ROOT)
    warnings.simplefilter("ignore")
    import torch, torch.nn as nn, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from opacus import PrivacyEngine
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    class ToyModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.net1 = nn.Linear(10, 10)
            self.relu = nn.ReLU()
            self.net2 = nn.Linear(10, 5)

        def forward(self, x):
            return self.net2(self.relu(self.net1(x)))

    def data():
        g = torch.Generator().manual_seed(rank)
        return DataLoader(TensorDataset(torch.randn(64, 10, generator=g), torch.randn(64, 5, generator=g)),
                          batch_size=16)

    for mode in ("per_layer_ddp", "flat_dpddp"):
        torch.manual_seed(0)
        model = ToyModel()
        if mode == "per_layer_ddp":
            module, clipping, max_grad_norm = DDP(model), "per_layer", [1.0, 1.0, 1.0, 1.0]
        else:
            module, clipping, max_grad_norm = DPDDP(model), "flat", 1.0
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        module, optimizer, loader = PrivacyEngine().make_private(
            module=module, optimizer=optimizer, data_loader=data(), noise_multiplier=0.5,
            max_grad_norm=max_grad_norm, clipping=clipping, poisson_sampling=False)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(module(x), y).backward()
            optimizer.step()
    dist.destroy_process_group()
""")

DDP_ACCUMULATION = textwrap.dedent("""
    import warnings
    import torch, torch.nn as nn, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.nn.utils import prune

    warnings.simplefilter("ignore")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14 * 14, 10))
    prune.l1_unstructured(model[0], "weight", amount=0.3)   # a forward pre-hook recomputes weight
    mask = (torch.rand_like(model[3].weight) > 0.2).float()

    def apply_mask(param):
        param.grad.mul_(mask)

    model[3].weight.register_post_accumulate_grad_hook(apply_mask)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for step in range(8):
        torch.manual_seed(100 * rank + step)
        x, y = torch.rand(4, 3, 16, 16), torch.randint(0, 10, (4,))
        if step % 4 != 3:
            with ddp.no_sync():                                   # accumulate locally
                nn.functional.cross_entropy(ddp(x), y).backward()
        else:
            nn.functional.cross_entropy(ddp(x), y).backward()     # all-reduce the sum
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    dist.destroy_process_group()
""")

FSDP2_FEATURES = textwrap.dedent("""
    import warnings
    import torch, torch.nn as nn, torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor

    warnings.simplefilter("ignore")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
    features, norms = {}, []
    model[1].register_forward_hook(lambda m, i, o: features.__setitem__("hidden", o.detach()))
    model[4].register_full_backward_hook(lambda m, gi, go: norms.append(go[0].norm().item()))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    mask = (torch.rand(64, 64) > 0.5).float()

    def prune(param):
        param.grad.mul_(distribute_tensor(mask, param.grad.device_mesh, param.grad.placements))

    model[2].weight.register_post_accumulate_grad_hook(prune)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(6):
        torch.manual_seed(100 * rank + step)
        x, y = torch.rand(16, 32), torch.randint(0, 4, (16,))
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()
""")


def run(name: str, source: str, folder: Path) -> None:
    program = folder / f"{name}.py"
    program.write_text(source)
    out = folder / f"{name}.json"
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "hooklint", "run", "-q", "--nproc", "2", "--timeout", "300",
                             "--output-format", "json", "-o", str(out), str(program)], capture_output=True,
                            text=True, cwd=folder, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    took = time.perf_counter() - start
    if result.returncode != 0 or not out.exists():
        print(f"{name:18} FAILED (exit {result.returncode}):\n{result.stderr[-2000:]}")
        return
    findings = json.loads(out.read_text())
    print(f"{name:18} {len(findings)} finding{'s' if len(findings) != 1 else ''}  {took:6.1f} s")
    for finding in findings:
        print(f"    {finding['code']} line {finding['location']['row']}: {finding['message'][:200]}")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="hooklint-bench-") as tmp:
        folder = Path(tmp)
        opacus_root = cache_dir() / "src" / "opacus-1.6.0"
        try:
            import scipy  # noqa: F401 - opacus' accountants need it
        except ImportError:
            print("opacus             skipped: scipy is not installed (opacus imports it)")
        else:
            if opacus_root.is_dir():
                run("opacus", f"OPACUS_ROOT = {str(opacus_root)!r}\n" + OPACUS, folder)
            else:
                print(f"opacus             skipped: {opacus_root} missing (python bench/corpus.py --download-only)")
        run("ddp_accumulation", DDP_ACCUMULATION, folder)
        run("fsdp2_features", FSDP2_FEATURES, folder)


if __name__ == "__main__":
    main()
