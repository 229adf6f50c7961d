"""LoRA-like adapters injected with forward hooks that return a modified
output, kept in a dict keyed by module name; `merge()` folds them into the
weights and removes the hooks, `unload()` removes them.  Correct."""
import torch
import torch.nn as nn


class LoRAInjector:
    def __init__(self, model, targets, rank=2, scale=0.5):
        self.model = model
        self.adapters = nn.ModuleDict()
        self.handles = {}
        self.scale = scale
        for name, module in model.named_modules():
            if name in targets and isinstance(module, nn.Linear):
                key = name.replace(".", "_")
                down = nn.Linear(module.in_features, rank, bias=False)
                up = nn.Linear(rank, module.out_features, bias=False)
                nn.init.zeros_(up.weight)
                self.adapters[key] = nn.Sequential(down, up)
                self.handles[name] = module.register_forward_hook(self._make_hook(key))

    def _make_hook(self, key):
        def hook(module, inputs, output):
            return output + self.scale * self.adapters[key](inputs[0])
        return hook

    def parameters(self):
        return self.adapters.parameters()

    def unload(self):
        for handle in self.handles.values():
            handle.remove()
        self.handles.clear()

    @torch.no_grad()
    def merge(self):
        modules = dict(self.model.named_modules())
        for name in list(self.handles):
            down, up = self.adapters[name.replace(".", "_")]
            modules[name].weight += self.scale * up.weight @ down.weight
        self.unload()


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
    for p in model.parameters():
        p.requires_grad_(False)
    lora = LoRAInjector(model, {"0", "2"})
    optimizer = torch.optim.Adam(lora.parameters(), lr=1e-2)
    x, y = torch.randn(64, 10), torch.randint(0, 2, (64,))
    for _ in range(20):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        hooked = model(x)
    lora.merge()
    with torch.no_grad():
        merged = model(x)
    assert torch.allclose(hooked, merged, atol=1e-5), (hooked - merged).abs().max()
    assert not model[0]._forward_hooks and not model[2]._forward_hooks
    print("loss", round(loss.item(), 4), "merged ok")


if __name__ == "__main__":
    main()
