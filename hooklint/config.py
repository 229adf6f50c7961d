"""``[tool.hooklint]`` in ``pyproject.toml`` (or a ``hooklint.toml``), merged with
command-line flags, which win.  Unknown keys and bad values are errors (exit 2),
so a typo never silently disables a rule."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hooklint.rules import UnknownRuleError, default_codes, expand_selectors, rule_entries

DEFAULT_EXCLUDES = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".hooklint_cache", ".ipynb_checkpoints", ".mypy_cache",
    ".nox",
    ".pants.d", ".pytype", ".ruff_cache", ".svn", ".tox", ".venv", "__pypackages__", "__pycache__",
    "_build", "buck-out", "build", "dist", "node_modules", "site-packages", "venv",
)

OUTPUT_FORMATS = ("full", "concise", "json", "json-lines", "sarif", "github", "junit")

# `fail-on`: the lowest severity whose findings make a run fail (exit 1).
FAIL_ON_LEVELS = ("error", "warning", "info")
_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}

# ruff's values for `target-version`.
TARGET_VERSIONS = tuple(f"py3{minor}" for minor in range(7, 15))


class ConfigError(Exception):
    """A configuration problem; the CLI prints it on one line and exits 2."""


@dataclass
class Config:
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] | None = None
    extend_exclude: list[str] = field(default_factory=list)
    force_exclude: bool = False
    respect_gitignore: bool = True
    output_format: str = "full"
    # graph layer (imports the user's models in a subprocess); `static-only = true` never does
    static_only: bool = False
    timeout: float = 60.0
    models: list[str] = field(default_factory=list)
    cache: bool = True
    cache_dir: str = ".hooklint_cache"
    memory_limit: int = 4096  # MiB of address space for the worker that imports models
    # the kernel sandbox of processes running model code: "auto", "require" or "off" (docs/sandbox.md)
    sandbox: str = "auto"
    # folders put on the worker's sys.path (relative to `root`), as PYTHONPATH would
    pythonpath: list[str] = field(default_factory=list)
    # programs `check --fix/--diff --verify` runs to prove a fix (`python train.py --epochs 1`, `pytest tests`)
    verify_entry: list[str] = field(default_factory=list)
    # the Python whose syntax is valid ("py312"); None: the running Python's
    target_version: str | None = None
    # the lowest severity that fails a run: info findings are printed but pass by default
    fail_on: str = "warning"
    # where the config file lives; relative paths in it are relative to this
    root: Path = field(default_factory=Path.cwd)
    source: Path | None = None  # the file the config came from
    # where target_version came from, for --show-settings and messages
    target_version_origin: str = ""

    def target(self) -> tuple[int, int] | None:
        return parse_target_version(self.target_version) if self.target_version else None

    def enabled_codes(self) -> set[str]:
        return resolve_codes(self.select, self.extend_select, self.ignore)

    def fails(self, severity: str) -> bool:
        """Does a finding of this severity ("error", "warning", "info") fail the run?"""
        return _SEVERITY_RANK.get(str(getattr(severity, "value", severity)), 2) >= _SEVERITY_RANK[self.fail_on]

    def ignored_for(self, rel_path: str) -> set[str]:
        from hooklint.files import glob_match

        codes: set[str] = set()
        for pattern, selectors in self.per_file_ignores.items():
            if glob_match(pattern, rel_path):
                codes |= expand_selectors(selectors)
        return codes

    def excludes(self) -> list[str]:
        base = list(DEFAULT_EXCLUDES) if self.exclude is None else list(self.exclude)
        return base + list(self.extend_exclude)

    def fingerprint(self) -> str:
        """What in the config can change results (for caches)."""
        return repr(
            (sorted(self.enabled_codes()), sorted(self.per_file_ignores.items()), self.models, self.timeout,
             self.target_version)
        )


def resolve_codes(select: list[str] | None, extend_select: list[str], ignore: list[str]) -> set[str]:
    """ruff's rule selection: for each code the most specific selector wins;
    on a tie, ``ignore`` wins."""
    enable_selectors = list(select) if select is not None else None
    result: set[str] = set()
    for rule in rule_entries():
        code = rule.code
        best_len, enabled = -1, False
        if enable_selectors is None:
            best_len, enabled = 0, code in default_codes()
        for sel in (enable_selectors or []) + list(extend_select):
            n = _specificity(sel, code)
            if n is not None and n > best_len:
                best_len, enabled = n, True
        for sel in ignore:
            n = _specificity(sel, code)
            if n is not None and n >= best_len:
                best_len, enabled = n, False
        if enabled:
            result.add(code)
    return result


def _specificity(selector: str, code: str) -> int | None:
    sel = selector.strip().upper()
    if sel == "ALL":
        return 0
    if sel.startswith("HKL"):
        return len(sel) if code.startswith(sel) else None
    # a rule name
    for rule in rule_entries():
        if rule.name == selector.strip().lower():
            return 10 if rule.code == code else None
    return None


_KEYS = {f.name.replace("_", "-") for f in fields(Config)} - {"root", "source", "target-version-origin"}


def parse_target_version(value: str) -> tuple[int, int]:
    return 3, int(value[3:])


def validate_target_version(value: object, where: str) -> str:
    if not isinstance(value, str) or value.lower() not in TARGET_VERSIONS:
        raise ConfigError(f"{where}: `target-version` must be one of {', '.join(TARGET_VERSIONS)}")
    return value.lower()


def validate_fail_on(value: object, where: str) -> str:
    if not isinstance(value, str) or value.lower() not in FAIL_ON_LEVELS:
        raise ConfigError(f"{where}: `fail-on` must be one of {', '.join(FAIL_ON_LEVELS)}")
    return value.lower()


_SPECIFIER = re.compile(r"^\s*(~=|===|==|>=|>|<=|<|!=)\s*v?(\d+)(?:\.(\d+|\*))?")


def requires_python_floor(spec: str) -> tuple[int, int] | None:
    """The lowest Python 3 version a ``requires-python`` specifier allows
    (``>=3.10``, ``~=3.11``, ``>=3.9,<4``, ``==3.12.*``), or None when it sets no
    lower bound hooklint can read."""
    floor: tuple[int, int] | None = None
    for part in spec.split(","):
        match = _SPECIFIER.match(part)
        if match is None or match.group(1) in ("<", "<=", "!="):
            continue
        major = int(match.group(2))
        minor = int(match.group(3)) if match.group(3) and match.group(3) != "*" else 0
        if major != 3:
            if major > 3:
                return None
            continue
        if floor is None or (major, minor) > floor:
            floor = (major, minor)
    return floor


def target_from_pyproject(start: Path) -> tuple[str, str] | None:
    """(target-version, where it came from) from the ``requires-python`` of the
    nearest ``pyproject.toml`` at or above ``start``."""
    for directory in [start, *start.parents]:
        pyproject = directory / "pyproject.toml"
        if not pyproject.is_file():
            continue
        try:
            data = load_toml(pyproject)
        except ConfigError:
            return None
        project = data.get("project")
        spec = project.get("requires-python") if isinstance(project, dict) else None
        if not isinstance(spec, str):
            return None
        floor = requires_python_floor(spec)
        if floor is None:
            return None
        minor = min(max(floor[1], 7), 14)
        return f"py3{minor}", f"requires-python = {spec!r} in {pyproject}"
    return None


def validate_selectors(values: list[str], where: str) -> None:
    try:
        expand_selectors(values)
    except UnknownRuleError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _as_list(value: Any, key: str, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return list(value)


def config_from_table(table: dict[str, Any], root: Path, source: Path | None) -> Config:
    where = str(source) if source else "configuration"
    cfg = Config(root=root, source=source)
    for raw_key, value in table.items():
        key = raw_key.replace("_", "-")
        if key not in _KEYS:
            raise ConfigError(f"{where}: unknown key `{raw_key}` in [tool.hooklint] "
                              f"(known: {', '.join(sorted(_KEYS))})")
        attr = key.replace("-", "_")
        if key in ("select", "extend-select", "ignore"):
            values = _as_list(value, key, where)
            validate_selectors(values, where)
            setattr(cfg, attr, values)
        elif key in ("exclude", "extend-exclude", "models"):
            setattr(cfg, attr, _as_list(value, key, where))
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: `per-file-ignores` must be a table of pattern = [codes]")
            parsed = {}
            for pattern, codes in value.items():
                codes = _as_list(codes, f"per-file-ignores.{pattern}", where)
                validate_selectors(codes, where)
                parsed[pattern] = codes
            cfg.per_file_ignores = parsed
        elif key in ("force-exclude", "respect-gitignore", "cache", "static-only"):
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: `{key}` must be true or false")
            setattr(cfg, attr, value)
        elif key == "output-format":
            if value not in OUTPUT_FORMATS:
                raise ConfigError(f"{where}: `output-format` must be one of {', '.join(OUTPUT_FORMATS)}")
            cfg.output_format = value
        elif key == "timeout":
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:
                raise ConfigError(f"{where}: `timeout` must be a positive, finite number of seconds")
            cfg.timeout = float(value)
        elif key == "memory-limit":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{where}: `memory-limit` must be a whole number of MiB (0: no limit)")
            cfg.memory_limit = value
        elif key == "sandbox":
            if value not in ("auto", "require", "off"):
                raise ConfigError(f"{where}: `sandbox` must be \"auto\", \"require\" or \"off\"")
            cfg.sandbox = value
        elif key == "pythonpath":
            folders = _as_list(value, key, where)
            for folder in folders:
                if not (root / folder).is_dir():
                    raise ConfigError(f"{where}: `pythonpath` entry `{folder}` is not a folder "
                                      f"(relative to {root})")
            cfg.pythonpath = folders
        elif key == "verify-entry":
            from hooklint.fix.entries import EntryError, validate_commands

            commands = _as_list(value, key, where)
            try:
                validate_commands(commands, root)
            except EntryError as exc:
                raise ConfigError(f"{where}: `verify-entry`: {exc}") from None
            cfg.verify_entry = commands
        elif key == "cache-dir":
            if not isinstance(value, str):
                raise ConfigError(f"{where}: `cache-dir` must be a string")
            cfg.cache_dir = value
        elif key == "fail-on":
            cfg.fail_on = validate_fail_on(value, where)
        elif key == "target-version":
            cfg.target_version = validate_target_version(value, where)
            cfg.target_version_origin = f"target-version in {where}"
    return cfg


_TOML_CACHE: dict[tuple[str, int, int], dict[str, Any]] = {}


def load_toml(path: Path) -> dict[str, Any]:
    """A TOML file's table; a file read before (same size and mtime) is not
    parsed again (finding the configuration, then `requires-python`, read the
    same pyproject.toml)."""
    try:
        st = os.stat(path)
        key = (str(Path(path).resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key is not None and key in _TOML_CACHE:
        return _TOML_CACHE[key]
    data = _parse_toml(path)
    if key is not None:
        _TOML_CACHE[key] = data
    return data


def _parse_toml(path: Path) -> dict[str, Any]:
    try:  # Python 3.11+; imported here, as most runs read no configuration
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
                          f"offset {exc.start})") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply to read") from None


def find_config_file(start: Path) -> Path | None:
    """The nearest ``hooklint.toml``, ``.hooklint.toml`` or ``pyproject.toml`` with a
    ``[tool.hooklint]`` table, from ``start`` upwards."""
    cur = start.resolve()
    for directory in [cur, *cur.parents]:
        for name in ("hooklint.toml", ".hooklint.toml"):
            if (directory / name).is_file():
                return directory / name
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file():
            try:
                data = load_toml(pyproject)
            except ConfigError:
                return pyproject  # let the caller report the parse error
            if "hooklint" in data.get("tool", {}):
                return pyproject
    return None


def load_config(explicit: str | None = None, start: Path | None = None, isolated: bool = False,
                overrides: dict[str, Any] | None = None) -> Config:
    """The configuration for ``start`` (or from the file ``explicit``);
    ``overrides``: keys given on the command line (``--config key=value``),
    which replace the file's."""
    if overrides:
        return _with_overrides(explicit, start, isolated, overrides)
    if isolated:
        return Config(root=Path.cwd())
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"{explicit}: configuration file not found")
    else:
        found = find_config_file(start or Path.cwd())
        if found is None:
            cfg = Config(root=(start or Path.cwd()).resolve())
            _default_target(cfg, cfg.root)
            return cfg
        path = found
    data = load_toml(path)
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("hooklint", {})
    else:
        table = data
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.hooklint] must be a table")
    cfg = config_from_table(table, path.resolve().parent, path)
    _default_target(cfg, cfg.root)
    return cfg


def _with_overrides(explicit: str | None, start: Path | None, isolated: bool, overrides: dict[str, Any]) -> Config:
    base = load_config(explicit, start, isolated)
    table: dict[str, Any] = {}
    if base.source is not None:
        data = load_toml(base.source)
        table = dict(data.get("tool", {}).get("hooklint", {}) if base.source.name == "pyproject.toml" else data)
    table.update(overrides)
    where = f"{base.source} with --config overrides" if base.source else "--config"
    try:
        cfg = config_from_table(table, base.root, base.source)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace(str(base.source or "configuration"), where, 1)) from None
    if cfg.target_version is None and base.target_version is not None:
        cfg.target_version, cfg.target_version_origin = base.target_version, base.target_version_origin
    return cfg


def parse_override(text: str) -> tuple[str, Any]:
    """``--config 'key = value'``: one TOML assignment (``select = ["HKL1"]``,
    ``fail-on = "error"``, ``timeout = 30``)."""
    try:  # Python 3.11+
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {text!r}: not a file, nor a TOML `key = value` ({exc})") from None
    if len(table) != 1:
        raise ConfigError(f"--config {text!r}: give one `key = value` per --config")
    key, value = next(iter(table.items()))
    if key in ("tool", "hooklint") and isinstance(value, dict):
        raise ConfigError(f"--config {text!r}: give the key without its table (`fail-on = \"error\"`)")
    if key.replace("_", "-") not in _KEYS:
        raise ConfigError(f"--config {text!r}: unknown key `{key}` (known: {', '.join(sorted(_KEYS))})")
    return key, value


def _default_target(cfg: Config, start: Path) -> None:
    """Without `target-version`, the project's `requires-python` decides (as in ruff)."""
    if cfg.target_version is not None:
        return
    found = target_from_pyproject(start.resolve())
    if found is not None:
        cfg.target_version, cfg.target_version_origin = found


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")
