"""Files built to find quadratic corners: time of `hooklint check` on one
file of N registrations, at N, N/2 and N/4, so the growth shows.

    python bench/purpose_built.py [--scale 1.0] [--case NAME]

Cases (each file generated, then checked with `--static-only --no-cache`,
and the legacy one also with `--diff --unsafe-fixes`, which builds a fix
per finding):

- legacy:  5,000 legacy `register_backward_hook` calls on 5,000 layers
- full:    40,000 `register_full_backward_hook` calls on one layer
- funcs:   1,000 functions, each registering, running and removing a hook
           and calling the next one

Prints wall time per size and the ratio to the previous size (2.0 is
linear; 4.0 would be quadratic).  The target (issue 16) is linear growth
and under 10 s for the full size on CI's 2-core machine."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def legacy(n: int) -> str:
    lines = ["import torch.nn as nn", "", "def hook(m, gi, go):", "    return None", ""]
    for i in range(n):
        lines += [f"l{i} = nn.Linear(2, 2)", f"l{i}.register_backward_hook(hook)"]
    return "\n".join(lines) + "\n"


def full(n: int) -> str:
    lines = ["import torch.nn as nn", "", "def hook(m, gi, go):", "    return None", "", "layer = nn.Linear(2, 2)"]
    lines += ["layer.register_full_backward_hook(hook)"] * n
    return "\n".join(lines) + "\n"


def funcs(n: int) -> str:
    lines = ["import torch", ""]
    for i in range(n):
        lines += [f"def f{i}(model, x):",
                  "    h = model.register_forward_hook(lambda m, i, o: None)",
                  "    y = model(x)",
                  "    h.remove()",
                  f"    return f{(i + 1) % n}(model, y) if x is None else y",
                  ""]
    return "\n".join(lines)


CASES = {
    "legacy": (legacy, 5000, [[], ["--diff", "--unsafe-fixes"]]),
    "full": (full, 40000, [[]]),
    "funcs": (funcs, 1000, [[]]),
}


def timed(path: Path, extra: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hooklint", "check", "--static-only", "--no-cache", "--isolated",
                    "--output-format", "concise", *extra, path.name], cwd=path.parent, capture_output=True,
                   timeout=3600)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every N (0.1 for a quick look)")
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.case or list(CASES):
            make, size, variants = CASES[name]
            for extra in variants:
                label = f"{name} {' '.join(extra)}".strip()
                previous = None
                for n in (max(1, int(size * args.scale) // 4), max(1, int(size * args.scale) // 2),
                          max(1, int(size * args.scale))):
                    path = Path(tmp) / f"{name}_{n}.py"
                    path.write_text(make(n))
                    seconds = timed(path, extra)
                    ratio = f"  x{seconds / previous:.2f}" if previous else ""
                    lines = path.read_text().count("\n")
                    print(f"{label:28} N={n:>6} ({lines:>6} lines): {seconds:7.2f} s{ratio}", flush=True)
                    previous = seconds
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    sys.exit(main())
