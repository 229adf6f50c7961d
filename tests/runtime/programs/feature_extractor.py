"""Feature extraction for a linear probe: forward hooks on chosen layers,
removed in `finally`, the extractor called once per batch.  Clean."""

import contextlib

import torch
import torch.nn as nn


def build_encoder() -> nn.Module:
    return nn.Sequential(
        nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64),
        nn.Linear(64, 64), nn.GELU(), nn.LayerNorm(64),
        nn.Linear(64, 16),
    )


def extract(model: nn.Module, layers: dict, batch: torch.Tensor) -> dict:
    features = {}
    handles = []

    def keep(name):
        def hook(module, inputs, output):
            features[name] = output.detach()
        return hook

    try:
        for name, layer in layers.items():
            handles.append(layer.register_forward_hook(keep(name)))
        with torch.no_grad():
            model(batch)
    finally:
        for handle in handles:
            handle.remove()
    return features


@contextlib.contextmanager
def capture_inputs(module: nn.Module, store: list):
    handle = module.register_forward_pre_hook(lambda m, args: store.append(args[0].detach()))
    try:
        yield store
    finally:
        handle.remove()


def main() -> None:
    torch.manual_seed(0)
    encoder = build_encoder().eval()
    layers = {"block1": encoder[2], "block2": encoder[5]}
    collected = {name: [] for name in layers}
    for _ in range(5):
        features = extract(encoder, layers, torch.rand(8, 32))
        for name, value in features.items():
            collected[name].append(value)
    with capture_inputs(encoder[6], []) as heads:
        for _ in range(3):
            encoder(torch.rand(4, 32))
    probe = nn.Linear(64, 3)
    optimizer = torch.optim.Adam(probe.parameters(), lr=1e-2)
    inputs = torch.cat(collected["block2"])
    targets = torch.randint(0, 3, (len(inputs),))
    for _ in range(3):
        optimizer.zero_grad()
        nn.functional.cross_entropy(probe(inputs), targets).backward()
        optimizer.step()
    print("features:", {k: len(v) for k, v in collected.items()}, "head inputs:", len(heads))


if __name__ == "__main__":
    main()
