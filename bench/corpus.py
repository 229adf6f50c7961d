"""A corpus of real PyTorch code full of hooks, and hooklint run over it.

    python bench/corpus.py [--cache DIR] [--packages a,b] [--download-only]
                           [--list] [--json FILE] [-j N] [--no-prefilter]

Downloads pinned releases of hook-heavy packages (`pip download --no-deps`,
wheels or sdists, from whatever index pip is configured with), unpacks their
Python files into a cache folder outside the repository (default
`~/.cache/hooklint-corpus`, or `$HOOKLINT_CORPUS`), then runs hooklint's
static pass over every file.  Nothing downloaded is ever written into the
repository.  The graph layer is not run: it would import the packages, whose
own dependencies are not installed here (say `hooklint check` on a folder of
the corpus without `--static-only` to try it).

Every file is accounted for: findings, clean (parsed, or ruled out by the
text prefilter), or a stated skip (a notice).  An internal error or a
file without a result is a failure: the script exits 1.

Other bench scripts import `corpus_files()` from here.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Pinned so that figures can be compared over time.  Chosen for hooks: model
# interpretation (captum, grad-cam, zennit, torchray, torch-lucent, nnsight,
# pyvene, transformer-lens), summaries and FLOP counters (torchinfo, thop,
# ptflops, fvcore), pruning and privacy (torch-pruning, opacus, backpack),
# feature extraction (torchextractor, torchlens) and two big model zoos whose
# code is mostly hook-free (timm, transformers), which keeps the prefilter honest.
PACKAGES: dict[str, str] = {
    "captum": "0.9.0",
    "grad-cam": "1.5.7",
    "torchinfo": "1.8.0",
    "nnsight": "0.8.1",
    "timm": "1.0.31",
    "transformers": "5.23.0",
    "torchextractor": "0.3.0",
    "torchlens": "2.36.1",
    "backpack-for-pytorch": "1.7.1",
    "opacus": "1.6.0",
    "torch-pruning": "1.6.1",
    "zennit": "0.5.1",
    "torch-lucent": "0.1.8",
    "fvcore": "0.1.5.post20221221",
    "thop": "0.1.1.post2209072238",
    "ptflops": "0.7.5",
    "torchray": "1.0.0.2",
    "pyvene": "0.1.8",
    "transformer-lens": "4.3.0",
}

PYTHON_SUFFIXES = (".py", ".pyi")


def cache_dir() -> Path:
    return Path(os.environ.get("HOOKLINT_CORPUS", "~/.cache/hooklint-corpus")).expanduser()


@dataclass
class Package:
    name: str
    version: str
    folder: Path | None = None  # unpacked sources; None when unavailable
    problem: str = ""

    @property
    def label(self) -> str:
        return f"{self.name}=={self.version}"


def _safe_member(name: str) -> PurePosixPath | None:
    """A member path that stays inside the target folder, or None."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return None
    return path


def unpack(archive: Path, dest: Path) -> int:
    """Extract the Python files of a wheel or sdist into ``dest``; returns how many."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    count = 0
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                member = _safe_member(info.filename)
                if member is None or info.is_dir() or not info.filename.endswith(PYTHON_SUFFIXES):
                    continue
                target = tmp.joinpath(*member.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(info))
                count += 1
    else:
        with tarfile.open(archive) as tf:
            for info in tf.getmembers():
                member = _safe_member(info.name)
                if member is None or not info.isfile() or not info.name.endswith(PYTHON_SUFFIXES):
                    continue
                handle = tf.extractfile(info)
                if handle is None:
                    continue
                target = tmp.joinpath(*member.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(handle.read())
                count += 1
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return count


def fetch(packages: dict[str, str], cache: Path, log=print) -> list[Package]:
    """Download and unpack each package once; a package that cannot be had is
    reported, not fatal."""
    downloads = cache / "downloads"
    sources = cache / "src"
    downloads.mkdir(parents=True, exist_ok=True)
    sources.mkdir(parents=True, exist_ok=True)
    out = []
    for name, version in packages.items():
        pkg = Package(name, version)
        out.append(pkg)
        dest = sources / f"{name}-{version}"
        if dest.is_dir():
            pkg.folder = dest
            continue
        target = downloads / f"{name}-{version}"
        target.mkdir(exist_ok=True)
        archives = sorted(target.iterdir())
        if not archives:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check",
                 "--dest", str(target), f"{name}=={version}"],
                capture_output=True, text=True)
            archives = sorted(target.iterdir())
            if proc.returncode != 0 or not archives:
                lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")] or ["pip download failed"]
                pkg.problem = lines[-1]
                log(f"skip {pkg.label}: {pkg.problem}")
                continue
        try:
            n = unpack(archives[0], dest)
        except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
            pkg.problem = f"cannot unpack {archives[0].name}: {exc}"
            log(f"skip {pkg.label}: {pkg.problem}")
            continue
        log(f"unpacked {pkg.label}: {n} Python files")
        pkg.folder = dest
    return out


def available_packages(cache: Path | None = None) -> list[Package]:
    """The pinned packages already unpacked in the cache (no download)."""
    sources = (cache or cache_dir()) / "src"
    out = []
    for name, version in PACKAGES.items():
        folder = sources / f"{name}-{version}"
        if folder.is_dir():
            out.append(Package(name, version, folder))
    return out


def package_files(folder: Path) -> list[str]:
    out = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        out.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(PYTHON_SUFFIXES))
    return out


def corpus_files(packages: list[Package] | None = None) -> list[str]:
    """Every Python file of the unpacked corpus, in a stable order."""
    files: list[str] = []
    for pkg in packages if packages is not None else available_packages():
        if pkg.folder is not None:
            files.extend(package_files(pkg.folder))
    return files


def count_lines(files: list[str]) -> int:
    total = 0
    for path in files:
        with open(path, "rb") as handle:
            total += handle.read().count(b"\n")
    return total


def package_of(path: str, packages: list[Package]) -> str:
    for pkg in packages:
        if pkg.folder is not None and path.startswith(str(pkg.folder) + os.sep):
            return pkg.name
    return "?"


def run_static(files: list[str], jobs: int, prefilter: bool = True, root: Path | None = None):
    """hooklint's static pass over ``files`` with the default rules, no cache."""
    from hooklint.config import Config
    from hooklint.engine import CheckOptions, check_many

    config = Config(root=root or cache_dir(), cache=False)
    options = CheckOptions(paths=files, config=config, codes=frozenset(config.enabled_codes()), static_only=True,
                           prefilter=prefilter, jobs=jobs)
    return check_many(files, options, {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="Corpus folder (default: $HOOKLINT_CORPUS or "
                        "~/.cache/hooklint-corpus).")
    parser.add_argument("--packages", default="", help="Comma-separated subset of the pinned packages.")
    parser.add_argument("--download-only", action="store_true")
    parser.add_argument("--list", action="store_true", help="Print every finding (path:line:col: code message).")
    parser.add_argument("--json", type=Path, help="Write every finding and notice to this file.")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-prefilter", dest="prefilter", action="store_false")
    args = parser.parse_args()

    cache = args.cache or cache_dir()
    chosen = dict(PACKAGES)
    if args.packages:
        wanted = [p.strip() for p in args.packages.split(",") if p.strip()]
        unknown = [p for p in wanted if p not in PACKAGES]
        if unknown:
            parser.error(f"not in the pinned list: {', '.join(unknown)}")
        chosen = {p: PACKAGES[p] for p in wanted}
    packages = fetch(chosen, cache)
    if args.download_only:
        return 0
    present = [p for p in packages if p.folder is not None]
    files = corpus_files(present)
    if not files:
        print("no corpus files (every download failed?)", file=sys.stderr)
        return 1
    lines = count_lines(files)

    start = time.perf_counter()
    results = run_static(files, args.jobs, args.prefilter, root=cache)
    elapsed = time.perf_counter() - start

    by_path = {r.path: r for r in results}
    from hooklint.engine import display_path

    missing = [f for f in files if display_path(f) not in by_path]
    errors = [n for r in results for n in r.notices if n.level.value == "error"]
    skipped = sum(1 for r in results if not r.findings and r.notices)
    with_findings = sum(1 for r in results if r.findings)
    parsed = sum(1 for r in results if r.parsed)
    clean = len(results) - with_findings - skipped
    findings = sorted((f for r in results for f in r.findings), key=lambda f: f.sort_key())

    print(f"corpus: {cache} ({len(present)} of {len(chosen)} packages): {len(files)} files, {lines} lines")
    for pkg in packages:
        if pkg.folder is None:
            print(f"  {pkg.label:40s} unavailable: {pkg.problem}")
            continue
        mine = [r for r in results if package_of(os.path.abspath(r.path), present) == pkg.name]
        n_find = sum(len(r.findings) for r in mine)
        print(f"  {pkg.label:40s} {len(mine):5d} files  {sum(r.parsed for r in mine):4d} parsed  {n_find:4d} findings")
    print(f"static pass (-j {args.jobs}, prefilter {'on' if args.prefilter else 'off'}): {elapsed:.2f} s; "
          f"{parsed} files parsed ({parsed / len(files):.1%}), the rest ruled out by their text")
    print(f"results: {with_findings} files with findings, {clean} clean, {skipped} skipped with a notice, "
          f"{len(errors)} internal errors, {len(missing)} without a result")
    per_rule = collections.Counter(f.code for f in findings)
    print("findings by rule: " + (", ".join(f"{c} {n}" for c, n in sorted(per_rule.items())) or "none"))
    for r in results:
        for n in r.notices:
            print(f"notice [{n.level.value}] {n.path}: {n.message}")
    if args.list:
        for f in findings:
            print(f"{f.path}:{f.location.row}:{f.location.column}: {f.code} {f.message}")
    if args.json:
        args.json.write_text(json.dumps({
            "files": len(files), "lines": lines,
            "findings": [f.to_dict() for f in findings],
            "notices": [n.to_dict() for r in results for n in r.notices],
        }, indent=1))
    return 1 if errors or missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
