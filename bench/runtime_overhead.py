"""Cost of run-time instrumentation on forward+backward, in one process.

    python bench/runtime_overhead.py [--rounds N] [--steps N] [--threads N]

Two models, each with a forward hook and a full backward hook on every module
(and a tensor hook on every parameter): a ResNet-style CNN and a transformer
encoder block.  Each round times ``--steps`` forward+backward passes of the
same model and hooks without instrumentation, then with it (the hooks adopted
by a session, as `hooklint.testing` does; alternating which goes first), and
prints the median time per pass and the median over rounds of the ratio
instrumented/plain (each round's two timings are taken back to back), with
the ratio of the best times next to it.
Target: at most 1.15x.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import hooklint  # noqa: E402


class BasicBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + x)


def resnet(channels: int = 32, blocks: int = 6, classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
        *[BasicBlock(channels) for _ in range(blocks)],
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes),
    )


def transformer_block(d_model: int = 128) -> nn.Module:
    return nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=4 * d_model, dropout=0.0,
                                      batch_first=True)


def add_hooks(model: nn.Module) -> int:
    """The usual monitoring hooks: activation and gradient statistics, kept cheap
    so that what is measured is the instrumentation."""
    stats: list = []
    count = 0
    for module in model.modules():
        module.register_forward_hook(lambda m, i, o: stats.append(1))
        module.register_full_backward_hook(lambda m, gi, go: stats.append(2))
        count += 2
    for param in model.parameters():
        param.register_hook(lambda g: None)
        count += 1
    return count


def time_steps(model: nn.Module, x: torch.Tensor, steps: int) -> float:
    """CPU time of this process per pass: other processes competing for the
    cores lengthen wall-clock time, not this."""
    start = time.process_time()
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        out = model(x)
        out = out[0] if isinstance(out, tuple) else out
        out.float().pow(2).mean().backward()
    return (time.process_time() - start) / steps


def measure(name: str, model: nn.Module, x: torch.Tensor, rounds: int, steps: int) -> float:
    hooks = add_hooks(model)
    time_steps(model, x, 2)  # warm-up: allocator, kernels
    plain, instrumented, paired = [], [], []
    for r in range(rounds):
        order = ("plain", "instrumented") if r % 2 == 0 else ("instrumented", "plain")
        times = {}
        for which in order:
            if which == "plain":
                times[which] = time_steps(model, x, steps)
            else:
                with hooklint.instrument() as session:
                    session.watch(model)
                    times[which] = time_steps(model, x, steps)
                assert not session.findings, [f.message for f in session.findings]
        plain.append(times["plain"])
        instrumented.append(times["instrumented"])
        paired.append(times["instrumented"] / times["plain"])
    # the ratio of each round's two timings, taken back to back, is steadier than
    # a ratio of medians on a busy machine
    ratio = statistics.median(paired)
    print(f"{name:<18} {sum(1 for _ in model.modules()):>7} {hooks:>6} {statistics.median(plain) * 1e3:>11.2f} "
          f"{statistics.median(instrumented) * 1e3:>16.2f} {ratio:>7.3f}x   (best: {min(plain) * 1e3:.2f} / "
          f"{min(instrumented) * 1e3:.2f} ms = {min(instrumented) / min(plain):.3f}x)")
    return ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steadier timings)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    warnings.simplefilter("ignore")
    print(f"python {platform.python_version()}, torch {torch.__version__}, {args.threads} thread(s), "
          f"{args.rounds} rounds x {args.steps} passes, median CPU ms per forward+backward")
    print(f"{'model':<18} {'modules':>7} {'hooks':>6} {'plain ms':>11} {'instrumented ms':>16} {'ratio':>8}")
    ratios = [
        measure("resnet-style", resnet(), torch.rand(16, 3, 32, 32), args.rounds, args.steps),
        measure("transformer block", transformer_block(), torch.rand(16, 64, 128), args.rounds, args.steps),
    ]
    worst = max(ratios)
    print(f"worst ratio {worst:.3f}x (target <= 1.15x): {'OK' if worst <= 1.15 else 'ABOVE TARGET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
