"""Feature extraction under model.eval() and torch.no_grad() with forward
hooks (correct), plus a full backward hook registered "to look at gradients
too": under no_grad no graph is built and it never fires."""
import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 4),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 3, 12, 12), torch.randint(0, 4, (8,))
    for _ in range(3):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    features, gradients = [], []
    handles = [
        model[4].register_forward_hook(lambda m, i, o: features.append(o.flatten(1))),
        model[4].register_full_backward_hook(lambda m, gi, go: gradients.append(go[0])),  # no-rule: backward hook under no_grad never fires
    ]
    model.eval()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 3, 12, 12))
    for handle in handles:
        handle.remove()
    print("features", len(features), "gradients", len(gradients))  # 3, 0


if __name__ == "__main__":
    main()
