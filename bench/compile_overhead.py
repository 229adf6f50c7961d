"""Cost of `hooklint run`-style instrumentation on a torch.compile'd model, and
whether it changes what dynamo compiles.

    python bench/compile_overhead.py [--rounds N] [--steps N] [--backend aot_eager|inductor] [--interleaved N]

Two models (a ResNet-style CNN and a stack of transformer encoder layers),
each with monitoring hooks registered before compiling (a forward hook on
every block, a tensor hook on every parameter), compiled with `--backend`
(default `aot_eager`).  Each round builds, compiles and warms up the model
twice, without instrumentation and inside `hooklint.instrument()` (a session
active from before the hooks are registered to the end, as `hooklint run`
does), alternating which goes first, then times `--steps` forward+backward
passes of each; the median over rounds of the paired ratio instrumented/plain
is printed with the median times.  Target: at most 1.05x.

The warm-up feeds three batch sizes, so dynamo compiles, recompiles for a new
shape and then reuses the graphs.  Compilations are counted twice: by a
counting backend that wraps the real one (one call per graph compiled) and by
dynamo's own counters (`unique_graphs`, graph breaks).  They must be equal
with and without hooklint.

`--interleaved N` adds a measurement that a loaded machine disturbs less: one
process builds, compiles and warms up the plain model, then starts a session
and does the same for the instrumented one, and times N blocks of `--steps`
passes of each, alternating; it prints the median of the paired block ratios.
During the plain blocks `torch.autograd.backward` is the original (the session
is active for the whole process, so any other patched entry point on the plain
model's path would count on both sides).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import hooklint  # noqa: E402
from bench.runtime_overhead import resnet  # noqa: E402

WARMUP_BATCHES = (8, 8, 16, 24, 16)
TIMED_BATCH = 16


def transformer(d_model: int = 64, layers: int = 3) -> nn.Module:
    return nn.Sequential(*[nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=2 * d_model, dropout=0.0,
                                                      batch_first=True) for _ in range(layers)],
                         nn.Flatten(), nn.LazyLinear(10))


MODELS = {
    "resnet (6 blocks, 32 ch, 16x16)": (lambda: resnet(32, 6), lambda n: torch.randn(n, 3, 16, 16)),
    "transformer (3 layers, d=64, seq 16)": (transformer, lambda n: torch.randn(n, 16, 64)),
}


def add_monitoring(model: nn.Module) -> None:
    """Activation and gradient statistics kept in tensors (a Python list that
    grows would make dynamo recompile at every call, with or without hooklint)."""
    activation = torch.zeros(())
    gradient = torch.zeros(())

    def activation_stat(module, inputs, output):
        activation.add_(output.detach().float().pow(2).mean())

    def gradient_stat(grad):
        gradient.add_(grad.detach().pow(2).sum())

    for module in model.children():
        module.register_forward_hook(activation_stat)
    for param in model.parameters():
        param.register_hook(gradient_stat)


class CountingBackend:
    """A backend that counts the graphs it is given and compiles them with the real one."""

    def __init__(self, backend: str):
        from torch._dynamo import lookup_backend

        self.real = lookup_backend(backend)
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.real(gm, example_inputs)


def one_run(build, make_input, backend: str, steps: int, instrumented: bool) -> tuple[float, dict]:
    """Build, hook, compile, warm up, then time `steps` passes (CPU seconds per pass)."""
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    counting = CountingBackend(backend)
    session = hooklint.instrument() if instrumented else None
    if session is not None:
        session.start()
    try:
        model = build()
        model(make_input(2))  # materialize lazy layers eagerly, before the hooks and the compile
        add_monitoring(model)
        compiled = torch.compile(model, backend=counting)
        for n in WARMUP_BATCHES:
            compiled(make_input(n)).sum().backward()
        x = make_input(TIMED_BATCH)
        start = time.process_time()
        for _ in range(steps):
            compiled(x).sum().backward()
        per_pass = (time.process_time() - start) / steps
        findings = len(session.findings) if session is not None else 0
    finally:
        if session is not None:
            session.stop()
    figures = {"graphs compiled": counting.graphs, "unique_graphs": counters["stats"]["unique_graphs"],
               "graph breaks": sum(counters["graph_break"].values()), "findings": findings}
    return per_pass, figures


def interleaved(build, make_input, backend: str, steps: int, blocks: int) -> tuple[float, float, float]:
    """(median plain ms per pass, median instrumented ms per pass, median of paired block ratios)."""
    torch._dynamo.reset()

    def ready():
        torch.manual_seed(0)
        model = build()
        model(make_input(2))
        add_monitoring(model)
        compiled = torch.compile(model, backend=backend)
        for n in WARMUP_BATCHES:
            compiled(make_input(n)).sum().backward()
        return compiled

    plain = ready()
    original_backward = torch.autograd.backward
    session = hooklint.instrument()
    session.start()
    try:
        hooked = ready()
        patched_backward = torch.autograd.backward
        x = make_input(TIMED_BATCH)
        times: dict[bool, list[float]] = {False: [], True: []}
        for block in range(blocks):
            for instrumented in ((False, True) if block % 2 == 0 else (True, False)):
                torch.autograd.backward = patched_backward if instrumented else original_backward
                compiled = hooked if instrumented else plain
                start = time.process_time()
                for _ in range(steps):
                    compiled(x).sum().backward()
                times[instrumented].append((time.process_time() - start) / steps)
        torch.autograd.backward = patched_backward
    finally:
        session.stop()
    ratios = [h / p for h, p in zip(times[True], times[False])]
    return statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3, statistics.median(ratios)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: steadier)")
    parser.add_argument("--interleaved", type=int, default=0, metavar="N",
                        help="also time N alternating blocks of --steps passes in one process")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    print(f"torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}, "
          f"backend {args.backend}, {args.rounds} rounds x {args.steps} passes, batch {TIMED_BATCH}; "
          f"load average {os.getloadavg()[0]:.1f}")
    worst = 0.0
    equal = True
    for name, (build, make_input) in MODELS.items():
        plain_times, hooked_times, ratios = [], [], []
        plain_figures = hooked_figures = None
        for round_ in range(args.rounds):
            order = (False, True) if round_ % 2 == 0 else (True, False)
            results = {}
            for instrumented in order:
                results[instrumented] = one_run(build, make_input, args.backend, args.steps, instrumented)
            plain_times.append(results[False][0])
            hooked_times.append(results[True][0])
            ratios.append(results[True][0] / results[False][0])
            if plain_figures is None:
                plain_figures, hooked_figures = results[False][1], results[True][1]
            elif (results[False][1], results[True][1]) != (plain_figures, hooked_figures):
                equal = False  # not the same from one round to the next
        ratio = statistics.median(ratios)
        worst = max(worst, ratio)
        print(f"\n{name}")
        print(f"  per pass: plain {statistics.median(plain_times) * 1e3:.2f} ms, instrumented "
              f"{statistics.median(hooked_times) * 1e3:.2f} ms (CPU time, medians)")
        print(f"  instrumented/plain: median of paired ratios {ratio:.3f}x (rounds: "
              f"{', '.join(f'{r:.3f}' for r in ratios)}); ratio of best times "
              f"{min(hooked_times) / min(plain_times):.3f}x")
        same = {k: v for k, v in plain_figures.items() if k != "findings"} == \
            {k: v for k, v in hooked_figures.items() if k != "findings"}
        equal = equal and same
        print(f"  compilations: plain {plain_figures['graphs compiled']} graphs (unique_graphs "
              f"{plain_figures['unique_graphs']}, graph breaks {plain_figures['graph breaks']}); instrumented "
              f"{hooked_figures['graphs compiled']} graphs (unique_graphs {hooked_figures['unique_graphs']}, "
              f"graph breaks {hooked_figures['graph breaks']}): {'equal' if same else 'DIFFERENT'}; "
              f"hooklint findings {hooked_figures['findings']}")
        if args.interleaved:
            plain_ms, hooked_ms, block_ratio = interleaved(build, make_input, args.backend, args.steps,
                                                           args.interleaved)
            print(f"  interleaved, {args.interleaved} blocks of {args.steps} passes in one process: plain "
                  f"{plain_ms:.2f} ms, instrumented {hooked_ms:.2f} ms; median of paired block ratios "
                  f"{block_ratio:.3f}x")
    print(f"\nworst median ratio {worst:.3f}x (target 1.05x); compilations {'equal' if equal else 'DIFFERENT'}; "
          f"load average {os.getloadavg()[0]:.1f}")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
