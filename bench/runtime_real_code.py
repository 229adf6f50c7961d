"""Run-time instrumentation on real libraries' hook code: each scenario runs a
package of the corpus (bench/corpus.py, read from its cache, never copied into
this repository) under ``hooklint.instrument(select=["ALL"])`` and prints how
many hook registrations were observed, the findings and the time.

    python bench/runtime_real_code.py

The libraries are well tested and used as documented here, so every finding
is a false positive to look at.  A scenario whose package (or one of the
package's own dependencies: captum needs tqdm and matplotlib, opacus scipy)
cannot be imported is skipped and says why.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import hooklint  # noqa: E402
from corpus import cache_dir  # noqa: E402

PACKAGE_ROOTS = ["captum-0.9.0", "opacus-1.6.0", "torchextractor-0.3.0", "torch-pruning-1.6.1"]


class Net(nn.Module):
    """A small CNN with ReLU modules (what guided backprop and LRP hook)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)
        self.relu3 = nn.ReLU()
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        x = self.relu2(self.conv2(self.relu1(self.conv1(x))))
        return self.out(self.relu3(self.fc(self.pool(x).flatten(1))))


def captum_attributions() -> None:
    """Gradient, guided, layer and DeepLift methods, three times each (hooks
    registered per call must be removed per call)."""
    from captum import attr

    model = Net().eval()
    x = torch.rand(2, 3, 8, 8)
    for _ in range(3):
        attr.Saliency(model).attribute(x, target=0)
        attr.GuidedBackprop(model).attribute(x, target=1)
        attr.Deconvolution(model).attribute(x, target=1)
        attr.LayerGradCam(model, model.conv2).attribute(x, target=2)
        attr.GuidedGradCam(model, model.conv2).attribute(x, target=0)
        attr.LayerConductance(model, model.conv2).attribute(x, target=0, n_steps=4)
        attr.LayerActivation(model, model.conv1).attribute(x)
        attr.InternalInfluence(model, model.fc).attribute(x, target=0, n_steps=4)
        attr.NeuronGradient(model, model.fc).attribute(x, neuron_selector=1)
        attr.DeepLift(model).attribute(x, target=0)
        attr.IntegratedGradients(model).attribute(x, target=0, n_steps=4)


def captum_lrp_and_shap() -> None:
    from captum import attr

    model = Net().eval()
    x = torch.rand(2, 3, 8, 8)
    for _ in range(2):
        attr.LRP(model).attribute(x, target=0)
        attr.LayerLRP(model, model.conv2).attribute(x, target=0)
    attr.DeepLiftShap(model).attribute(x, baselines=torch.zeros(3, 3, 8, 8), target=0)
    attr.LayerDeepLift(model, model.conv2).attribute(x, target=0)


def opacus_per_sample_gradients() -> None:
    """GradSampleModule's forward and full backward hooks, kept for the model's
    life, over a short DP-SGD training run."""
    from opacus import PrivacyEngine

    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.rand(32, 10), torch.randint(0, 3, (32,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model, optimizer, loader = PrivacyEngine().make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0)
    for _ in range(2):
        for xb, yb in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            optimizer.step()


def torchextractor_features() -> None:
    import torchextractor as tx

    model = tx.Extractor(Net(), ["conv1", "conv2", "fc"])
    for _ in range(3):
        _out, features = model(torch.rand(2, 3, 8, 8))
        assert set(features) == {"conv1", "conv2", "fc"}


def torch_pruning_step() -> None:
    import torch_pruning as tp

    model = Net()
    x = torch.rand(1, 3, 8, 8)
    pruner = tp.pruner.MagnitudePruner(model, x, importance=tp.importance.MagnitudeImportance(p=2),
                                       pruning_ratio=0.5, ignored_layers=[model.out])
    pruner.step()
    model(x).sum().backward()


SCENARIOS = [
    ("captum: 11 attribution methods x3", captum_attributions),
    ("captum: LRP, LayerLRP x2, DeepLiftShap", captum_lrp_and_shap),
    ("opacus: PrivacyEngine, 8 DP-SGD steps", opacus_per_sample_gradients),
    ("torchextractor: Extractor x3", torchextractor_features),
    ("torch-pruning: MagnitudePruner step", torch_pruning_step),
]


def main() -> int:
    src = cache_dir() / "src"
    for name in PACKAGE_ROOTS:
        if (src / name).is_dir():
            sys.path.insert(0, str(src / name))
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, corpus {src}")
    total = 0
    for name, scenario in SCENARIOS:
        start = time.perf_counter()
        with hooklint.instrument(select=["ALL"]) as session:
            try:
                scenario()
            except ImportError as exc:
                print(f"{name}: skipped ({exc})")
                continue
            observed = len(session._records)
        findings = session.findings
        total += len(findings)
        print(f"{name}: {observed} registrations observed, {len(findings)} findings, "
              f"{len(session.notices)} internal errors, {time.perf_counter() - start:.1f} s")
        for finding in findings:
            print(f"    {finding.path}:{finding.location.row}: {finding.code} {finding.message}")
        for notice in session.notices:
            print(f"    {notice.message}")
    print(f"findings on real libraries: {total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
