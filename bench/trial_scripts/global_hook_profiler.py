"""Per-layer timing with the global forward hooks of
torch.nn.modules.module: registered around the profiled step and removed in
`finally` (correct)."""
import time
from collections import defaultdict

import torch
import torch.nn as nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook


def profile_step(model, optimizer, x, y, timings):
    started = {}

    def before(module, inputs):
        started[id(module)] = time.perf_counter()

    def after(module, inputs, output):
        timings[type(module).__name__] += time.perf_counter() - started.pop(id(module), time.perf_counter())

    pre = register_module_forward_pre_hook(before)
    post = register_module_forward_hook(after)
    try:
        loss = nn.functional.cross_entropy(model(x), y)
    finally:
        pre.remove()
        post.remove()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    timings = defaultdict(float)
    for _ in range(5):
        profile_step(model, optimizer, torch.randn(8, 20), torch.randint(0, 5, (8,)), timings)
    assert not torch.nn.modules.module._global_forward_hooks
    print({k: round(v * 1e3, 3) for k, v in timings.items()})


if __name__ == "__main__":
    main()
