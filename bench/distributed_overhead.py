"""What `hooklint run --nproc 2` costs over plain `python -m torch.distributed.run
--standalone --nproc-per-node 2`, on the same training script.

    python bench/distributed_overhead.py [--rounds 3] [--steps 40]

Two programs, each with hooks of every kind (a forward hook and a read-only full
backward hook on every module, a gradient-mask tensor hook on every weight under
DDP, a post-accumulate-grad mask on every sharded weight under FSDP2):

- DDP: a 6-layer MLP (width 256, batch 64 per rank) wrapped in
  DistributedDataParallel;
- FSDP2: the same MLP, `fully_shard` on every layer and on the model.

Each round launches each program plainly, under hooklint, and under hooklint
with HKL601 off (`--ignore HKL601`: no checksum, no collective), in alternating
order; rank 0 reports its median step time (after one warm-up step).  Printed:
the median over rounds of the whole launch (process start to exit: import of
hooklint, the session, the merge of the ranks' results) and of the step time
(instrumentation, and HKL601's checksums and all-reduce after every DDP
backward), with their ratios to the plain launch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PROGRAM = textwrap.dedent("""
    import os, sys, time, warnings
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    warnings.simplefilter("ignore")
    ENGINE, STEPS, OUT = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(256, 10))
    seen = []
    for module in model.modules():
        module.register_forward_hook(lambda m, i, o: None)
        if isinstance(module, nn.Linear):
            module.register_full_backward_hook(lambda m, gi, go: seen.append(go[0].shape[0]))
    mask = (torch.rand(256, 256) > 0.1).float()

    if ENGINE == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        for module in model.modules():
            if isinstance(module, nn.Linear) and module.weight.shape == mask.shape:
                module.weight.register_hook(lambda g: g * mask)
        run = DDP(model)
    else:
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import distribute_tensor
        for module in model:
            if isinstance(module, nn.Linear):
                fully_shard(module)
        fully_shard(model)

        def prune(param):
            param.grad.mul_(distribute_tensor(mask, param.grad.device_mesh, param.grad.placements))

        for module in model:
            if isinstance(module, nn.Linear) and module.weight.shape == mask.shape:
                module.weight.register_post_accumulate_grad_hook(prune)
        run = model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(i):
        torch.manual_seed(1000 * rank + i)
        x, y = torch.rand(64, 256), torch.randint(0, 10, (64,))
        nn.functional.cross_entropy(run(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    step(-1)
    times = []
    for i in range(STEPS):
        start = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - start)
    if rank == 0:
        with open(OUT, "w") as f:
            f.write(str(sorted(times)[len(times) // 2]))  # the median step: robust to a busy machine
    dist.destroy_process_group()
""")


MODES = ("plain", "hooklint", "hooklint, HKL601 off")


def launch(mode: str, program: Path, engine: str, steps: int, folder: Path) -> tuple[float, float]:
    out = folder / "step.txt"
    if out.exists():
        out.unlink()
    instrumented = mode != "plain"
    if instrumented:
        command = [sys.executable, "-m", "hooklint", "run", "-q", "--output-format", "concise", "--nproc", "2",
                   *(["--ignore", "HKL601"] if "off" in mode else []), str(program)]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                   str(program)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    start = time.perf_counter()
    result = subprocess.run([*command, engine, str(steps), str(out)], capture_output=True, text=True, env=env,
                            cwd=folder, timeout=900)
    wall = time.perf_counter() - start
    if result.returncode != 0 or not out.exists():
        raise SystemExit(f"{mode} {engine} failed:\n{result.stderr[-3000:]}")
    if instrumented and result.stdout.strip():
        raise SystemExit(f"findings on the benchmark program:\n{result.stdout}")
    return wall, float(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hooklint-bench-") as tmp:
        folder = Path(tmp)
        program = folder / "train.py"
        program.write_text(PROGRAM)
        for engine in ("ddp", "fsdp2"):
            walls: dict[str, list[float]] = {m: [] for m in MODES}
            steps: dict[str, list[float]] = {m: [] for m in MODES}
            for round_ in range(args.rounds):
                order = MODES if round_ % 2 == 0 else MODES[::-1]  # alternate, so that a trend hits all alike
                for mode in order:
                    wall, step = launch(mode, program, engine, args.steps, folder)
                    walls[mode].append(wall)
                    steps[mode].append(step)
            rows.append((engine, {m: statistics.median(walls[m]) for m in MODES},
                         {m: statistics.median(steps[m]) * 1000 for m in MODES}))
    print(f"2 ranks, gloo, torch.distributed.run --standalone; {args.steps} steps (median step of each run); "
          f"median of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}")
    print(f"{'engine':7} {'mode':22} {'launch s':>9} {'ratio':>7} {'ms/step':>9} {'ratio':>7}")
    for engine, wall, step in rows:
        for mode in MODES:
            print(f"{engine:7} {mode:22} {wall[mode]:9.2f} {wall[mode] / wall['plain']:6.2f}x {step[mode]:9.2f} "
                  f"{step[mode] / step['plain']:6.2f}x")


if __name__ == "__main__":
    main()
