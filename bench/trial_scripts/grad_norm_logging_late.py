"""Per-layer gradient-norm logging for a debugging session: the backward hooks
are registered after the forward pass of the step they should observe (buggy:
a module backward hook registered after the forward does not fire for that
graph). The activation-norm forward hooks are fine."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    grad_norms, act_norms = {}, {}
    fwd_handles = [
        m.register_forward_hook(lambda mod, i, o, n=n: act_norms.__setitem__(n, o.norm().item()))
        for n, m in model.named_children()
    ]
    x, y = torch.randn(16, 6, requires_grad=True), torch.randint(0, 3, (16,))
    loss = F.cross_entropy(model(x), y)
    bwd_handles = [
        m.register_full_backward_hook(lambda mod, gi, go, n=n: grad_norms.__setitem__(n, go[0].norm().item()))  # expect: HKL302
        for n, m in model.named_children()
    ]
    loss.backward()
    for h in fwd_handles + bwd_handles:
        h.remove()
    print("activation norms:", len(act_norms), "gradient norms:", len(grad_norms))


if __name__ == "__main__":
    main()
