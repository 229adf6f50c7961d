"""What the graph analysis costs, next to what the user's own code costs.

    python bench/graph_cost.py [--repeat N] [--arch NAME ...]

For a few real architectures built without downloads (``transformers``
models constructed from their default config; ``pip install -r
bench/requirements-graph.txt``), in a fresh temporary project whose
``[tool.hooklint] models`` names a factory building the model:

* baseline: a fresh ``python`` that imports torch and transformers and
  constructs the model, then exits (what running the user's script costs
  before any training starts);
* check (cold): ``hooklint check`` on the factory's file, without a cache:
  the static pass plus the worker importing torch, building the model,
  tracing it (or running a forward) and reporting;
* ratio: check (cold) / baseline;
* check (warm): the same command again, answered from ``.hooklint_cache/``.

Two models written here (a CNN and an ``nn.TransformerEncoder``) are
measured too, and are all that runs without ``transformers``.  Every timing
is wall-clock, best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TRANSFORMERS_ARCHS = {
    "bert-base": """
        import torch
        from transformers import BertConfig, BertModel

        def build():
            model = BertModel(BertConfig())
            return model, (torch.randint(0, 1000, (1, 16)),)
    """,
    "gpt2": """
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        def build():
            model = GPT2LMHeadModel(GPT2Config())
            return model, (torch.randint(0, 1000, (1, 16)),)
    """,
    "resnet-50": """
        import torch
        from transformers import ResNetConfig, ResNetModel

        def build():
            model = ResNetModel(ResNetConfig())
            return model, (torch.rand(1, 3, 224, 224),)
    """,
    "vit-base": """
        import torch
        from transformers import ViTConfig, ViTModel

        def build():
            model = ViTModel(ViTConfig())
            return model, (torch.rand(1, 3, 224, 224),)
    """,
}

# Written here: they need nothing but torch, and plain torch.fx traces the CNN
# (the transformers models need their own tracer and take the fallback).
LOCAL_ARCHS = {
    "cnn": """
        import torch
        import torch.nn as nn

        def build():
            layers = []
            channels = 3
            for width in (64, 128, 256, 512):
                layers += [nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                           nn.MaxPool2d(2)]
                channels = width
            model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(512 * 14 * 14, 1000))
            return model, (torch.rand(1, 3, 224, 224),)
    """,
    "transformer-encoder": """
        import torch
        import torch.nn as nn

        def build():
            layer = nn.TransformerEncoderLayer(d_model=768, nhead=12, batch_first=True)
            return nn.TransformerEncoder(layer, num_layers=12), (torch.rand(1, 16, 768),)
    """,
}


def has_transformers() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


def timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    return time.perf_counter() - start, proc


def best(repeat: int, cmd: list[str], cwd: Path, before=None) -> tuple[float, subprocess.CompletedProcess]:
    results = []
    for _ in range(repeat):
        if before is not None:
            before()
        results.append(timed(cmd, cwd))
    return min(results, key=lambda r: r[0])


def project(folder: Path, source: str) -> None:
    (folder / "bench_model.py").write_text(textwrap.dedent(source), encoding="utf-8")
    (folder / "pyproject.toml").write_text(
        '[tool.hooklint]\nmodels = ["bench_model:build"]\ntimeout = 600\n', encoding="utf-8")


def clear_cache(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder / ".hooklint_cache", ignore_errors=True)


def measure(name: str, source: str, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"hooklint-bench-{name}-") as tmp:
        folder = Path(tmp)
        project(folder, source)
        env_python = sys.executable
        # os._exit: the worker skips the interpreter's teardown too (torch's takes ~0.5 s)
        baseline, proc = best(repeat, [env_python, "-c", "import os, torch\nfrom bench_model import build\n"
                                                         "build()\nos._exit(0)"], folder)
        if proc.returncode != 0:
            return {"arch": name, "error": f"building it failed: {proc.stderr.strip().splitlines()[-1]}"}
        hooklint = [env_python, "-m", "hooklint", "check", "bench_model.py", "--output-format", "concise"]
        cold, proc = best(repeat, hooklint, folder, before=lambda: clear_cache(folder))
        if proc.returncode not in (0, 1):
            return {"arch": name, "error": proc.stderr.strip()}
        warm, _ = best(max(repeat, 3), hooklint, folder)
        graph = subprocess.run([env_python, "-m", "hooklint", "graph", "--output-format", "json"],
                               cwd=folder, capture_output=True, text=True, timeout=900)
        data = json.loads(graph.stdout or "{}")
        models = data.get("factories", [])
        notes = [n["message"] for n in data.get("notices", [])]
        return {
            "arch": name,
            "baseline": baseline,
            "cold": cold,
            "warm": warm,
            "modules": len(models[0]["modules"]) if models else 0,
            "method": models[0]["method"] if models else "not analysed: " + "; ".join(notes),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs (default 1)")
    parser.add_argument("--arch", action="append", help="only these architectures")
    args = parser.parse_args(argv)
    if has_transformers():
        archs = {**TRANSFORMERS_ARCHS, **LOCAL_ARCHS}
        origin = ("transformers models built from their default config (no download), and two models "
                  "written in this bench (cnn, transformer-encoder)")
    else:
        archs = LOCAL_ARCHS
        origin = ("transformers is not installed (pip install -r bench/requirements-graph.txt): "
                  "only the models written in this bench")
    if args.arch:
        archs = {k: v for k, v in archs.items() if k in args.arch}
    import torch
    from tabulate import tabulate

    print(f"hooklint graph cost: {origin}")
    print(f"Python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"best of {args.repeat}")
    rows = []
    for name, source in archs.items():
        result = measure(name, source, args.repeat)
        if "error" in result:
            rows.append((name, "", "", "", "", "", result["error"]))
            continue
        rows.append((name, result["modules"], f"{result['baseline']:.2f}", f"{result['cold']:.2f}",
                     f"{result['cold'] / result['baseline']:.2f}", f"{result['warm']:.2f}", result["method"]))
        print(f"  {name}: done", file=sys.stderr)
    print(tabulate(rows, headers=("architecture", "modules", "import torch + build (s)", "hooklint check (s)",
                                  "ratio", "warm cache (s)", "method"), tablefmt="simple"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
