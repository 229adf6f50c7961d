"""Feature extractor as a context manager: forward hooks on named layers,
looked up through dict(model.named_modules()), removed in __exit__ (correct)."""
import torch
import torch.nn as nn

# expect: (none)


class FeatureExtractor:
    def __init__(self, model, layer_names):
        self.model = model
        self.layer_names = list(layer_names)
        self.features = {}
        self._handles = []

    def _make_hook(self, name):
        def hook(module, inputs, output):
            self.features[name] = output.detach()
        return hook

    def __enter__(self):
        modules = dict(self.model.named_modules())
        for name in self.layer_names:
            self._handles.append(modules[name].register_forward_hook(self._make_hook(name)))
        return self

    def __exit__(self, exc_type, exc, tb):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        return False


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 5),
    )


def main():
    model = build_model().eval()
    batches = [torch.randn(4, 3, 28, 28) for _ in range(5)]
    pooled = []
    with torch.no_grad(), FeatureExtractor(model, ["1", "4", "7"]) as fx:
        for batch in batches:
            model(batch)
            pooled.append(fx.features["4"].mean(dim=(2, 3)))
    print("features", torch.cat(pooled).shape, "hooks left:", len(model[4]._forward_hooks))


if __name__ == "__main__":
    main()
