"""(The first draft of grad_accum_clip_hooks.py, kept: the lambda returns
clamp_'s result and torch raises at backward.)  Gradient accumulation over k micro-batches (no zero_grad between them),
a post-accumulate-grad hook that clips each parameter's accumulated
gradient in place, and a tensor hook that scales the incoming gradient by
1/k."""
import torch
import torch.nn as nn

ACCUMULATE = 4


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 48), nn.Tanh(), nn.Linear(48, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    handles = []
    for p in model.parameters():
        handles.append(p.register_hook(lambda grad: grad / ACCUMULATE))
        handles.append(p.register_post_accumulate_grad_hook(lambda param: param.grad.clamp_(-0.5, 0.5)))  # expect: HKL203
    data = [(torch.randn(8, 12), torch.randint(0, 3, (8,))) for _ in range(16)]
    for step, (x, y) in enumerate(data):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if (step + 1) % ACCUMULATE == 0:
            optimizer.step()
            optimizer.zero_grad()
    for handle in handles:
        handle.remove()
    print("loss", round(loss.item(), 4))


if __name__ == "__main__":
    main()
