"""Model surgery: count activations / record output statistics on every leaf
module by registering hooks through model.apply(fn); handles kept in a list and
removed in finally (correct)."""
import torch
import torch.nn as nn

# expect: (none)


def attach_stat_hooks(model, stats, handles):
    def register(module):
        if len(list(module.children())) == 0:
            def hook(mod, inputs, output, name=type(module).__name__):
                stats.setdefault(name, []).append(float(output.detach().abs().mean()))
            handles.append(module.register_forward_hook(hook))
    model.apply(register)


def main():
    model = nn.Sequential(
        nn.Linear(12, 24), nn.GELU(), nn.LayerNorm(24), nn.Linear(24, 6),
    )
    stats, handles = {}, []
    try:
        attach_stat_hooks(model, stats, handles)
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(8, 12))
    finally:
        for handle in handles:
            handle.remove()
    print({k: len(v) for k, v in stats.items()}, "left:", sum(len(m._forward_hooks) for m in model.modules()))


if __name__ == "__main__":
    main()
