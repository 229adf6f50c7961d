"""Feature extraction that registers its forward hook in a function called
once per batch and never removes it (buggy: hooks stack up)."""
import torch
import torch.nn as nn


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(),
        nn.Conv2d(8, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 5),
    )


def extract(model, layer_name, batch, store):
    layer = dict(model.named_modules())[layer_name]
    layer.register_forward_hook(lambda m, i, o: store.append(o.detach().mean(dim=(2, 3))))  # expect: HKL304
    with torch.no_grad():
        model(batch)


def main():
    model = build_model().eval()
    store = []
    for _ in range(4):
        extract(model, "3", torch.randn(2, 3, 20, 20), store)
    # 1 + 2 + 3 + 4 = 10 feature maps instead of 4
    print("stored", len(store), "hooks on layer:", len(model[3]._forward_hooks))


if __name__ == "__main__":
    main()
