"""The text prefilter: most files are never parsed, and no finding is lost.

Each rule's ``triggers`` (and ``trigger_pattern``) must hold for every file it
can flag.  The fast tests check each rule alone on its own examples and
fixtures and on spellings Python allows around the trigger words; the slow
one compares the shortcut with a full parse over real code: the installed
torch package's sources and the fixtures (always available), and the
downloaded corpus of bench/corpus.py when it is present.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hooklint.config import Config, resolve_codes
from hooklint.engine import CheckOptions, check_many
from hooklint.rules import all_rules
from hooklint.rules.base import Rule, expected_findings
from tests.conftest import FIXTURES, codes_at, lint

STATIC_RULES = [r for r in all_rules() if r.check is not Rule.check and not r.code.startswith("HKL0")]


@pytest.mark.parametrize("rule", STATIC_RULES, ids=lambda r: r.code)
def test_each_rule_alone_admits_its_examples_and_fixtures(rule):
    """Only this rule selected, so the prefilter uses only its own triggers."""
    sources = [inv.code for inv in rule.INVALID] + rule.code_blocks("Example")
    # (fixtures/projects/ is checked as projects: its findings need the other files)
    sources += [p.read_text(encoding="utf-8") for p in sorted(FIXTURES.rglob("*.py"))
                if FIXTURES / "projects" not in p.parents]
    checked = 0
    for source in sources:
        want = sorted((row, c) for row, c in expected_findings(source) if c == rule.code)
        if not want:
            continue
        checked += 1
        got = codes_at(f for f in lint(source, rule.code) if f.code == rule.code)
        assert got == want, (rule.code, source[:200])
    assert checked, f"{rule.code}: no example or fixture expects it"


# Spellings of a call Python accepts that a naive trigger would miss.
SPELLINGS = {
    "HKL303": [
        "import torch.nn as nn\nlayer = nn.Linear(2, 2)\ny = layer . forward(x)\n",
        "import torch.nn as nn\nlayer = nn.Linear(2, 2)\ny = layer.\\\n    forward(x)\n",
        "import torch.nn as nn\nlayer = nn.Linear(2, 2)\ny = (layer.  # the module\n     forward)(x)\n",
        "import torch.nn as nn\nlayer = nn.Linear(2, 2)\r\ny = (layer.\r  forward)(x)\r",
        "import torch.nn as nn\nlayer = nn.Linear(2, 2)\ny = layer.\uff46orward(x)\n",  # fullwidth f: NFKC
    ],
    "HKL704": [
        "import torch, torch.nn as nn\n@torch.compiler.disable\ndef log_shapes(module, args, output):\n"
        "    print(output.shape)\nmodel = nn.Sequential(nn.Linear(4, 4), nn.ReLU())\n"
        "model[0].register_forward_hook(log_shapes)\nmodel.compile(fullgraph  # strict\n    = True)\n"
        "model(torch.rand(1, 4))\n",
        "import torch, torch.nn as nn\n@torch.compiler.disable\ndef log_shapes(module, args, output):\n"
        "    print(output.shape)\nmodel = nn.Sequential(nn.Linear(4, 4), nn.ReLU())\n"
        "model[0].register_forward_hook(log_shapes)\nmodel.compile(\uff46ullgraph=True)\n"
        "model(torch.rand(1, 4))\n",  # fullwidth f: NFKC
    ],
    "HKL501": [
        "import torch\nclass F(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, a, b):\n"
        "        return a * b\n    @staticmethod\n    def \\\n  backward(ctx, g):\n        return g\n",
        "from torch.autograd import Function as Fn\nclass F(Fn):\n    @staticmethod\n    def forward(ctx, a, b):\n"
        "        return a * b\n    @staticmethod\n    def\tbackward(ctx, g):\n        return g\n",
    ],
}


@pytest.mark.parametrize("code, source", [(c, s) for c, ss in SPELLINGS.items() for s in ss])
def test_unusual_spellings_pass_the_prefilter(code, source):
    full = [f.code for f in lint(source, code, prefilter=False)]
    assert full == [code], "the spelling must be one the rule flags"
    assert [f.code for f in lint(source, code)] == full


def test_super_forward_alone_is_ruled_out_by_its_text():
    from hooklint.static.checker import may_contain_findings

    text = "import torch.nn as nn\nclass A(nn.Linear):\n    def forward(self, x):\n        return super().forward(x)\n"
    assert not may_contain_findings(text, frozenset({"HKL303"}))
    assert may_contain_findings(text + "y = A(2, 2).forward(1)\n", frozenset({"HKL303"}))


def _real_code_folders() -> list[Path]:
    import importlib.util

    folders = [FIXTURES]
    spec = importlib.util.find_spec("torch")
    if spec and spec.submodule_search_locations:
        folders.append(Path(list(spec.submodule_search_locations)[0]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from corpus import available_packages
    finally:
        sys.path.pop(0)
    folders += [p.folder for p in available_packages() if p.folder is not None]
    return folders


def _py_files(folder: Path) -> list[str]:
    out = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        out.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(".py"))
    return out


@pytest.mark.slow
def test_the_shortcut_and_a_full_parse_agree_on_real_code():
    files = [f for folder in _real_code_folders() for f in _py_files(folder)]
    assert len(files) > 1000, "torch's own sources should be there"
    codes = frozenset(resolve_codes(None, [], []))
    results = {}
    for prefilter in (True, False):
        options = CheckOptions(paths=files, config=Config(root=FIXTURES.parent, cache=False), codes=codes,
                               static_only=True, prefilter=prefilter, jobs=2)
        results[prefilter] = check_many(files, options, {})
    parsed = sum(r.parsed for r in results[True])
    assert parsed < 0.15 * len(files), f"{parsed} of {len(files)} files parsed: the triggers got broad"

    def keyed(rs):
        # HKL001 (syntax errors) is documented to be reported only in files the prefilter admits
        return sorted((f.path, f.location.row, f.location.column, f.code, f.message)
                      for r in rs for f in r.findings if f.code != "HKL001")

    assert keyed(results[True]) == keyed(results[False])
    assert keyed(results[False]), "real code with no finding at all: is the pass running?"


def test_a_file_is_checked_by_the_rules_its_text_admits():
    """A file another rule admits is checked only by the rules whose own triggers
    it holds (the others cannot flag it); `prefilter=False` runs them all."""
    from hooklint.static.checker import admitted_rules

    codes = frozenset(resolve_codes(None, [], []))
    compiled = "import torch\nmodel = torch.compile(model)\n"
    assert admitted_rules(compiled, codes) == {"HKL701"}
    hooked = compiled + "h = model.register_forward_hook(fn)\n"
    assert {"HKL701", "HKL304", "HKL308"} <= admitted_rules(hooked, codes)
    # Python reads identifiers in NFKC form: the fullwidth spelling is the same API
    assert "HKL304" in admitted_rules(compiled + "h = model.\uff52egister_forward_hook(fn)\n", codes)


def test_rules_not_admitted_are_not_run(monkeypatch):
    from hooklint.static import checker

    ran = []
    for rule in checker._static_rules(frozenset({"HKL303", "HKL304"})):
        monkeypatch.setattr(rule, "check", lambda ctx, code=rule.code: ran.append(code) or [])
    text = "import torch.nn as nn\nlayer = nn.Linear(2, 2)\ny = layer.forward(x)\n"
    checker.check_text("a.py", text, frozenset({"HKL303", "HKL304"}))
    assert ran == ["HKL303"]
    ran.clear()
    checker.check_text("a.py", text, frozenset({"HKL303", "HKL304"}), prefilter=False)
    assert sorted(ran) == ["HKL303", "HKL304"]


def _admission_texts() -> list[str]:
    """Texts that pass and fail the prefilter: the fixtures, each rule's own
    examples, texts only HKL003 (`# noqa: HKL...`) admits, and spellings
    Python reads in NFKC form (fullwidth letters; a combining mark that NFKC
    composes with the letter before it, so the text as written holds a word
    the NFKC form does not)."""
    texts = []
    for path in sorted(FIXTURES.rglob("*.py")):
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
    for rule in STATIC_RULES:
        texts.extend(rule.VALID)
        texts.extend(getattr(example, "code", example) for example in rule.INVALID)
    texts += [
        "x = 1  # noqa: HKL304\n",
        "x = 1\n",
        "import torch\nmodel = torch.compile(model)\n",
        "h = model.\uff52egister_forward_hook(fn)\n",
        "m.remove\u0301()\nh = model.register_forward_hook(fn)\n",
        "y = layer.forward(x)\n",
        "y = super().forward(x)\n",
    ]
    return texts


def test_one_reading_answers_the_prefilter_and_the_rules_it_admits():
    """checker._admission (what check_text asks) gives what the prefilter
    (may_contain_findings) and admitted_rules give asked one after the other,
    for every selection of rules tried: all of them, each family, one rule."""
    from hooklint.static import checker

    every = frozenset(resolve_codes(None, [], [])) | {"HKL003"}  # HKL003 is not on by default
    selections = [every, frozenset({"HKL003"}), frozenset({"HKL303"}), frozenset({"HKL003", "HKL304"})]
    selections += [frozenset(c for c in every if c.startswith(f"HKL{family}")) for family in "12345678"]
    texts = _admission_texts()
    for codes in selections:
        passed = 0
        for text in texts:
            expected_pass = checker.may_contain_findings(text, codes)
            passes, admitted = checker._admission(text, codes)
            assert passes == expected_pass, (sorted(codes)[:3], text[:80])
            if passes:
                passed += 1
                assert admitted == checker.admitted_rules(text, codes), (sorted(codes)[:3], text[:80])
        assert 0 < passed, sorted(codes)[:3]
    assert not checker._admission("x = 1\n", every)[0]
    assert checker._admission("x = 1  # noqa: HKL304\n", every) == (True, frozenset())


def test_branches_shared_by_rules_are_searched_once_per_text():
    """Rules that hold the same pattern branch share one scan of it, and a
    search that reuses what other patterns found in the text gives the answer
    of a fresh search."""
    from hooklint.rules import rule_entries
    from hooklint.static import checker

    patterns = sorted({e.trigger_pattern for e in rule_entries() if e.trigger_pattern})
    first = {id(scan) for p in patterns for _a, scans in checker._branches(p).groups for scan in scans}
    again = {id(scan) for p in patterns for _a, scans in checker._branches(p).groups for scan in scans}
    assert first == again
    counted = [scan for p in patterns for _a, scans in checker._branches(p).groups for scan in scans]
    assert len({id(s) for s in counted}) < len(counted), "no branch shared by two rules any more?"
    for text in _admission_texts():
        memo: dict = {}
        for pattern in patterns:
            branches = checker._branches(pattern)
            assert branches.search(text, memo) == branches.search(text), (pattern[:60], text[:60])
