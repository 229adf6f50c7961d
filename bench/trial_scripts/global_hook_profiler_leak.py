"""The same profiler without the cleanup: each profiled step adds one more
global forward hook, to every module of every model in the process."""
from collections import defaultdict

import torch
import torch.nn as nn
from torch.nn.modules.module import register_module_forward_hook


def profile_step(model, optimizer, x, y, counts):
    register_module_forward_hook(lambda m, i, o: counts.__setitem__(type(m).__name__, counts[type(m).__name__] + 1))  # expect: HKL304
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    counts = defaultdict(int)
    for _ in range(5):
        profile_step(model, optimizer, torch.randn(8, 20), torch.randint(0, 5, (8,)), counts)
    # 4 modules x (1+2+3+4+5) calls instead of 4 x 5
    print(dict(counts), "global hooks:", len(torch.nn.modules.module._global_forward_hooks))


if __name__ == "__main__":
    main()
