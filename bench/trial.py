"""hooklint as a user meets it: the scripts in bench/trial_scripts/.

Each script is small but real (a model, a forward, a backward, an optimizer
step) and says what hooklint should report with `# expect: HKL201` at the end
of the line the finding belongs on (several codes: `# expect: HKL201, HKL202`;
a layer when only one layer can see it: `# expect: HKL403@run`).  A script
with no such comment must come out clean.

For every script this runs, the way a user would:

  hooklint check FILE                 static rules + graph layer
  hooklint run FILE                   the script itself, instrumented
  python FILE                         (to show whether the script runs at all)

and with --fixes also

  hooklint check --diff --unsafe-fixes --verify FILE

and prints per script: expected, found (with the layer), false positives,
misses.  A finding counts as expected when its file, code and line match an
`# expect:` comment; any other finding is a false positive.  A line marked
`# no-rule: why` is a known problem no rule covers: listed, not counted.

Besides single scripts: a folder with a `run.py` is a small project
(checked as a whole, `hooklint run run.py`), and a notebook (`.ipynb`,
expectations in its cells, reported as `cell N:line`) is checked, its code
cells are run in one process instead of `hooklint run`, and with --fixes
`--fix --unsafe-fixes` is applied to a copy, which must still load as a
notebook and run.

    python bench/trial.py             # the table
    python bench/trial.py --fixes     # also each fix's --verify verdict
    python bench/trial.py -v          # also every finding's message
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "trial_scripts"
EXPECT = re.compile(r"#\s*expect:\s*(HKL\d{3}(?:@\w+)?(?:\s*,\s*HKL\d{3}(?:@\w+)?)*)")
NO_RULE = re.compile(r"#\s*no-rule:\s*(.+)$")


def hooklint_command() -> list[str]:
    return [sys.executable, "-m", "hooklint"]


@dataclass
class Found:
    code: str
    line: str  # "12", or "explain/cam.py:12" in a project, "cell 3:2" in a notebook
    origin: str
    message: str


@dataclass
class ScriptResult:
    name: str
    expected: set[tuple[str, str]]
    no_rule: list[str] = field(default_factory=list)
    found: list[Found] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    times: dict[str, float] = field(default_factory=dict)
    fixes: list[str] = field(default_factory=list)

    @property
    def hits(self) -> set[tuple[str, str]]:
        return {(f.line, f.code) for f in self.found} & self.expected

    @property
    def misses(self) -> set[tuple[str, str]]:
        return self.expected - self.hits

    @property
    def false_positives(self) -> list[Found]:
        return [f for f in self.found if (f.line, f.code) not in self.expected]


def _sources(path: Path) -> list[tuple[str, str]]:
    """(prefix for a line number, text) of every source the case holds."""
    if path.is_dir():
        return [(f"{p.relative_to(path).as_posix()}:", p.read_text()) for p in sorted(path.rglob("*.py"))]
    if path.suffix == ".ipynb":
            return [(f"cell {n}:", c) for n, c in enumerate(_numbered_cells(path), start=1) if c is not None]
    return [("", path.read_text())]


def _numbered_cells(path: Path) -> list[str | None]:
    """Every cell, code or not (hooklint numbers cells as the notebook shows them)."""
    return ["".join(c["source"]) if c["cell_type"] == "code" else None
            for c in json.loads(path.read_text())["cells"]]


def expectations(path: Path) -> tuple[set[tuple[str, str]], list[str]]:
    wanted, no_rule = set(), []
    for prefix, text in _sources(path):
        for number, line in enumerate(text.splitlines(), start=1):
            match = EXPECT.search(line)
            if match:
                for item in match.group(1).split(","):
                    wanted.add((f"{prefix}{number}", item.strip().split("@")[0]))
            match = NO_RULE.search(line)
            if match:
                no_rule.append(f"{prefix}{number}: {match.group(1).strip()}")
    return wanted, no_rule


def _where(item: dict, path: Path, cwd: Path) -> str:
    row = item["location"]["row"]
    if item.get("cell") is not None:
        return f"cell {item['cell']}:{row}"
    if path.is_dir():
        name = Path(item.get("filename", ""))
        name = name.relative_to(cwd) if name.is_absolute() else name
        return f"{name.as_posix()}:{row}"
    return str(row)


def run(command: list[str], cwd: Path, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return done, time.perf_counter() - start


def looks_internal(stderr: str) -> bool:
    return "Traceback (most recent call last)" in stderr and "hooklint" in stderr or "internal error" in stderr


def check_script(path: Path, with_fixes: bool) -> ScriptResult:
    wanted, no_rule = expectations(path)
    result = ScriptResult(path.name + ("/" if path.is_dir() else ""), wanted, no_rule)
    cwd = path if path.is_dir() else path.parent
    target = "." if path.is_dir() else path.name
    script = "run.py" if path.is_dir() else path.name
    with tempfile.TemporaryDirectory() as tmp:
        check_out = Path(tmp) / "check.json"
        done, seconds = run(
            hooklint_command() + ["check", "--isolated", "--no-cache", "--output-format", "json", "-o", str(check_out), target],
            cwd,
        )
        result.times["check"] = seconds
        if done.returncode not in (0, 1) or looks_internal(done.stderr):
            result.problems.append(f"check exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        for line in done.stderr.splitlines():
            if line.startswith("hooklint: error") or "internal" in line:
                result.problems.append(f"check: {line}")
        if check_out.exists():
            for item in json.loads(check_out.read_text() or "[]"):
                result.found.append(Found(item["code"], _where(item, path, cwd), item.get("origin", "?"), item["message"]))

        if path.suffix == ".ipynb":
            # `hooklint run` takes scripts: run the code cells as the kernel would, to show they run
            done, seconds = run([sys.executable, "-c", RUN_CELLS, path.name], cwd)
            result.times["run"] = seconds
            if done.returncode != 0:
                result.problems.append(f"cells: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        else:
            run_out = Path(tmp) / "run.json"
            done, seconds = run(
                hooklint_command() + ["run", "--isolated", "--output-format", "json", "-o", str(run_out), script],
                cwd,
            )
            result.times["run"] = seconds
            if "hooklint" in done.stderr and "internal error" in done.stderr:
                result.problems.append(f"run: internal error: {done.stderr.strip().splitlines()[-1]}")
            if done.returncode != 0:
                result.problems.append(f"run: the script exited {done.returncode}")
            if run_out.exists():
                for item in json.loads(run_out.read_text() or "[]"):
                    result.found.append(Found(item["code"], _where(item, path, cwd), "run", item["message"]))

        if with_fixes:
            done, seconds = run(
                hooklint_command() + ["check", "--isolated", "--no-cache", "--diff", "--unsafe-fixes", "--verify", target],
                cwd,
            )
            result.times["verify"] = seconds
            diff = done.stdout.strip()
            verdicts = [line for line in done.stderr.splitlines() if "fix" in line and line.startswith("hooklint")]
            if diff:
                result.fixes.append(f"diff of {diff.count(chr(10)) + 1} lines")
            result.fixes.extend(verdicts)
            if looks_internal(done.stderr):
                result.problems.append("verify: traceback")
            if path.suffix == ".ipynb":
                copy = Path(tmp) / path.name
                copy.write_bytes(path.read_bytes())
                run(hooklint_command() + ["check", "--isolated", "--no-cache", "--fix", "--unsafe-fixes", copy.name],
                    Path(tmp))
                changed = copy.read_bytes() != path.read_bytes()
                done, _ = run([sys.executable, "-c", RUN_CELLS, copy.name], Path(tmp))
                result.fixes.append(f"--fix on a copy: {'changed' if changed else 'unchanged'}, the fixed "
                                    f"notebook {'loads and runs' if done.returncode == 0 else 'FAILS: ' + done.stderr.strip()[-200:]}")
    return result


RUN_CELLS = """
import json, sys
cells = [c for c in json.load(open(sys.argv[1]))["cells"] if c["cell_type"] == "code"]
exec(compile("\\n".join("".join(c["source"]) for c in cells), sys.argv[1], "exec"), {"__name__": "__main__"})
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixes", action="store_true", help="also run check --diff --unsafe-fixes --verify")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every finding's message")
    parser.add_argument("scripts", nargs="*", help="script names (default: all)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    paths = sorted([*SCRIPTS.glob("*.py"), *SCRIPTS.glob("*.ipynb"),
                    *(p for p in SCRIPTS.iterdir() if (p / "run.py").is_file())])
    if args.scripts:
        paths = [p for p in paths if p.name in args.scripts or p.stem in args.scripts]
    results = [check_script(p, args.fixes) for p in paths]

    def fmt(pairs) -> str:
        return ", ".join(f"{code}:{line}" for line, code in sorted(pairs, key=lambda p: (p[0].split(":")[0], p))) or "-"

    print(f"{'script':34} {'expected':22} {'found (layer)':34} {'false positives':18} misses")
    for r in results:
        found = ", ".join(sorted({f"{f.code}:{f.line} ({f.origin})" for f in r.found})) or "-"
        fps = ", ".join(sorted({f"{f.code}:{f.line}" for f in r.false_positives})) or "-"
        print(f"{r.name:34} {fmt(r.expected):22} {found:34} {fps:18} {fmt(r.misses)}")
        for problem in r.problems:
            print(f"    problem: {problem}")
        for fix in r.fixes:
            print(f"    fix: {fix}")
        for note in r.no_rule:
            print(f"    known, no rule: {note}")
        if args.verbose:
            for f in r.found:
                print(f"    {f.code}:{f.line} ({f.origin}) {f.message}")
    expected = sum(len(r.expected) for r in results)
    hits = sum(len(r.hits) for r in results)
    fps = sum(len({(f.line, f.code) for f in r.false_positives}) for r in results)
    clean = [r for r in results if not r.expected and not r.no_rule]
    print()
    print(f"expected findings found: {hits}/{expected}")
    print(f"false positives: {fps}; scripts that should be clean and are: "
          f"{sum(1 for r in clean if not r.found)}/{len(clean)}")
    print(f"known problems no rule covers: {sum(len(r.no_rule) for r in results)}")
    print(f"problems (crash, internal error, script failing): {sum(len(r.problems) for r in results)}")
    slow = max(results, key=lambda r: r.times.get("check", 0))
    print(f"slowest check: {slow.name} {slow.times['check']:.1f} s")
    return 0 if hits == expected and fps == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
