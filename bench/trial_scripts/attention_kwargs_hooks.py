"""Attention-map capture in a small transformer-like block: a forward hook
with `with_kwargs=True` reads the `need_weights` keyword, a forward pre-hook
with `with_kwargs=True` forces it on by returning new kwargs, and a
`prepend=True` hook runs before a hook registered earlier.  All correct,
handles removed after the run."""
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, dim))

    def forward(self, x):
        attended, _ = self.attn(x, x, x, need_weights=False)
        x = self.norm(x + attended)
        return x + self.mlp(x)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block(), nn.Flatten(), nn.Linear(16 * 6, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    attention_maps = {}
    order = []

    def want_weights(module, args, kwargs):
        return args, {**kwargs, "need_weights": True, "average_attn_weights": False}

    def capture(name):
        def hook(module, args, kwargs, output):
            if kwargs.get("need_weights"):
                attention_maps[name] = output[1].detach()
        return hook

    handles = []
    for name, module in model.named_modules():
        if isinstance(module, nn.MultiheadAttention):
            handles.append(module.register_forward_pre_hook(want_weights, with_kwargs=True))
            handles.append(module.register_forward_hook(capture(name), with_kwargs=True))
    handles.append(model[1].register_forward_hook(lambda m, i, o: order.append("late")))
    handles.append(model[1].register_forward_hook(lambda m, i, o: order.append("first"), prepend=True))
    try:
        for _ in range(3):
            x = torch.randn(4, 6, 16)
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        for handle in handles:
            handle.remove()
    assert order[:2] == ["first", "late"], order
    print({name: tuple(a.shape) for name, a in attention_maps.items()})


if __name__ == "__main__":
    main()
