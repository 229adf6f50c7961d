"""What the worker executes of a model file, which files it imports, and which
instances it builds: all decided statically (no torch here)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from conftest import FIXTURES, ROOT
from hooklint.graph.plan import plan_for, wants_import
from hooklint.graph.sanitize import definitions_only

SCRIPT = textwrap.dedent("""\
    '''A training script.'''
    import os
    import logging
    from typing import TYPE_CHECKING, Optional
    import torch
    import torch.nn as nn
    try:
        import apex
    except ImportError:
        apex = None
    if TYPE_CHECKING:
        from collections import OrderedDict
    if torch.cuda.is_available():
        DEVICE = "cuda"
    logger = logging.getLogger(__name__)
    HIDDEN = 2 * 8
    SIZES = (HIDDEN, [1, 2], {"a": -1})
    Alias = Optional[nn.Module]
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    scaled = device
    os.environ["X"] = "1"

    class Net(nn.Module):
        def __init__(self, hidden=HIDDEN):
            super().__init__()
            self.fc = nn.Linear(4, hidden)

        def forward(self, x):
            return self.fc(x)

    net = Net()
    for step in range(10):
        net(torch.rand(2, 4)).sum().backward()
    while True:
        pass
    with open("log.txt", "w") as f:
        f.write("done")
    if __name__ == "__main__":
        Net(32)
""")


def _kept(source: str) -> list[str]:
    """First line of each kept statement; ``guarded:`` for computed ones (kept inside ``try``)."""
    out = []
    for stmt in definitions_only(ast.parse(source)).tree.body:
        if getattr(stmt, "_hl_guard", False):
            out.append("guarded: " + ast.unparse(stmt.body[0]).splitlines()[0])
        else:
            out.append(ast.unparse(stmt).splitlines()[0])
    return out


def test_only_definitions_are_kept():
    kept = _kept(SCRIPT)
    assert kept == [
        "'A training script.'", "import os", "import logging", "from typing import TYPE_CHECKING, Optional",
        "import torch", "import torch.nn as nn", "try:", "if TYPE_CHECKING:",
        "guarded: if torch.cuda.is_available():",
        "logger = logging.getLogger(__name__)", "HIDDEN = 2 * 8", "SIZES = (HIDDEN, [1, 2], {'a': -1})",
        "Alias = Optional[nn.Module]",
        "guarded: device = torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')",
        "guarded: scaled = device",
        "class Net(nn.Module):",
    ]


def test_skipped_statements_and_the_names_only_they_bind():
    sanitized = definitions_only(ast.parse(SCRIPT))
    assert sanitized.skipped_lines == [19, 22, 32, 33, 35, 37, 39]
    assert {"net", "step", "f"} <= sanitized.skipped_names
    # computed values are kept, inside `try`; an alias of one too (it is unbound when the value failed)
    assert sanitized.computed_names == {"device": 20, "scaled": 21}
    assert "Net" not in sanitized.skipped_names and "HIDDEN" in sanitized.kept_names


COMPUTED = textwrap.dedent("""\
    import math
    import os
    import collections
    from functools import lru_cache
    from packaging import version
    import torch
    import torch.nn as nn
    from .helpers import get_version, make_trainer, register_backend

    __version__ = get_version()
    MIN_TORCH = version.parse("1.8")
    _registry = set()
    _autowrap = {}
    _SCALE = math.sqrt(2.0)
    MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    _CFG = {k: v * 2 for k, v in dict(a=1, b=2).items()}
    _NAMES = tuple(dict.fromkeys(["a", "b", "a"]))
    _registry.add("x")
    register_backend("mlx", _SCALE)
    register_local("mlx")
    torch.nn.modules.module.register_module_forward_hook(print)
    _autowrap["gelu"] = _SCALE
    __all__ = ["Net"]
    __all__ += ["Block"]

    def _ntuple(n):
        return lambda x: (x,) * n

    def register_local(name):
        _registry.add(name)

    to_2tuple = _ntuple(2)

    class Cfg:
        def __init__(self, dim=8):
            self.dim = dim

    DEFAULT = Cfg(dim=4)
    register_local("cpu")

    class Net(nn.Module):
        pass

    net = Net()
    state = torch.load("weights.pt")
    trainer = make_trainer()
    result = trainer.fit(net)
    args = __import__("argparse").ArgumentParser().parse_args()
    os.makedirs("out", exist_ok=True)
    torch.manual_seed(0)
    seed = torch.manual_seed(0)
    log = open("log.txt", "w")
    model = torch.hub.load("pytorch/vision", "resnet18")
    bert = collections.OrderedDict().from_pretrained("bert")
""")


def test_computed_module_level_values_are_kept_and_effects_are_not():
    kept = _kept(COMPUTED)
    assert kept[8:] == [
        "guarded: __version__ = get_version()",
        "guarded: MIN_TORCH = version.parse('1.8')",
        "guarded: _registry = set()",
        "_autowrap = {}",
        "guarded: _SCALE = math.sqrt(2.0)",
        "guarded: MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)",
        "guarded: _CFG = {k: v * 2 for k, v in dict(a=1, b=2).items()}",
        "guarded: _NAMES = tuple(dict.fromkeys(['a', 'b', 'a']))",
        "guarded: _registry.add('x')",
        "guarded: _autowrap['gelu'] = _SCALE",
        "__all__ = ['Net']",
        "guarded: __all__ += ['Block']",
        "def _ntuple(n):",
        "def register_local(name):",
        "guarded: to_2tuple = _ntuple(2)",
        "class Cfg:",
        "guarded: DEFAULT = Cfg(dim=4)",
        "guarded: register_local('cpu')",
        "class Net(nn.Module):",
        # `trainer = make_trainer()` calls an imported function: kept (inside `try`); its `fit` is not
        "guarded: trainer = make_trainer()",
    ]


def test_computed_values_run_and_a_failing_one_leaves_its_name_unbound():
    source = textwrap.dedent("""\
        import math
        _registry = set()
        SCALE = math.sqrt(4.0)
        BROKEN = math.sqrt(-1.0)
        ALIAS = BROKEN
        def register(fn):
            _registry.add(fn.__name__)
            return fn
        @register
        def gelu(x):
            return x * SCALE
    """)
    sanitized = definitions_only(ast.parse(source))
    namespace: dict = {}
    exec(compile(sanitized.tree, "m.py", "exec"), namespace)  # noqa: S102 - the snippet above
    assert namespace["_registry"] == {"gelu"} and namespace["SCALE"] == 2.0
    assert "BROKEN" not in namespace and "ALIAS" not in namespace
    assert sanitized.computed_names["BROKEN"] == 4


def test_a_missing_computed_value_is_explained():
    from hooklint.graph.build import user_error

    try:
        exec(compile("BROKEN", "m.py", "exec"), {})  # noqa: S102
    except NameError as exc:
        message = user_error(exc, (), {"BROKEN": 4})
    assert message == ("NameError: name 'BROKEN' is not defined (m.py:1); `BROKEN` is computed at the top level (line 4) "
                       "and computing it failed while hooklint imported the definitions")


def test_kept_blocks_are_filtered_too():
    source = textwrap.dedent("""\
        try:
            import apex
            apex.amp.register_half_function(None, None)
        except ImportError:
            print("no apex")
            apex = None
    """)
    tree = definitions_only(ast.parse(source)).tree
    assert ast.unparse(tree) == "try:\n    import apex\nexcept ImportError:\n    apex = None"


def test_literal_constructor_calls_in_order():
    plan = plan_for(ast.parse(SCRIPT))
    assert [c.name for c in plan.classes] == ["Net"]
    assert [(c.text, c.line) for c in plan.calls] == [("Net()", 32), ("Net(32)", 40)]


def test_calls_with_non_literal_arguments_or_inside_classes_are_not_built():
    source = textwrap.dedent("""\
        import torch.nn as nn
        import argparse

        class Block(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.fc = nn.Linear(width, width)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block(4)

        args = argparse.ArgumentParser().parse_args()
        Block(args.width)
        Block(len(args.sizes))
        Block(width=8)
        Block(width=8)
        Block(int("8"))
    """)
    plan = plan_for(ast.parse(source))
    # builtins that build plain values are literal (`int("8")`); `args` is not (no add_argument)
    assert [(c.text, c.line) for c in plan.calls] == [("Block(width=8)", 17), ("Block(int('8'))", 19)]


def test_names_assigned_once_and_argparse_defaults_are_inlined():
    source = textwrap.dedent("""\
        import argparse
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self, classes, width=4, dropout=False):
                super().__init__()
                self.fc = nn.Linear(width, classes)

        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--num-classes", type=int, default=10)
            parser.add_argument("--width", dest="hidden", default=8)
            parser.add_argument("--dropout", action="store_true")
            parser.add_argument("--data")
            args = parser.parse_args()
            model = Net(args.num_classes, args.hidden, args.dropout)
            other = Net(args.data)

        if __name__ == "__main__":
            classes = 3
            cfg = dict(width=16)
            net = Net(classes, **cfg)
            retried = 1
            retried = 2
            Net(retried)
    """)
    plan = plan_for(ast.parse(source))
    assert [(c.text, c.line) for c in plan.calls] == [
        ("Net(10, 8, False)", 16),  # `--data` has no default: `Net(args.data)` is not built
        ("Net(3, **dict(width=16))", 22),  # `retried` is assigned twice: not built
    ]


def test_seeds_literal_calls_and_hooked_builtin_layers():
    seed002 = plan_for(ast.parse((FIXTURES / "seeds" / "seed002_custom_function.py").read_text()))
    assert [c.text for c in seed002.calls] == ["LinearCraft(20, 5, np.array([1, 3, 5]))"]
    seed003 = plan_for(ast.parse((FIXTURES / "seeds" / "seed003_freeze_element.py").read_text()))
    assert [c.text for c in seed003.calls] == ["nn.Conv2d(3, 1, 3)"] and seed003.classes == []


def test_which_files_are_imported():
    def text(name):
        return (FIXTURES / "seeds" / name).read_text(encoding="utf-8")

    assert wants_import(text("seed004_autograd_and_hooks.py"))  # defines modules
    assert wants_import(text("seed003_freeze_element.py"))  # a hook on a Conv2d it builds
    assert not wants_import(text("seed003_fixed.py"))  # tensor hooks only: nothing to learn
    assert not wants_import("import numpy as np\nclass A:\n    pass\n")
    assert not wants_import("import torch\nx = torch.rand(3)\nx.register_hook(print)\n")
    assert not wants_import("import torch\nclass Broken(nn.Module:\n")


def test_parent_side_modules_do_not_import_torch():
    code = ("import sys\n"
            "import hooklint.graph.facts, hooklint.graph.link, hooklint.graph.plan, hooklint.graph.provider\n"
            "import hooklint.graph.cache, hooklint.graph.render, hooklint.graph.cli_options, hooklint.cli.graph\n"
            "import hooklint.graph.project, hooklint.graph.roots, hooklint.graph.sanitize\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_check_with_the_graph_imports_torch_only_in_the_worker(tmp_path):
    (tmp_path / "model.py").write_text((FIXTURES / "models" / "legacy_hooks.py").read_text(), encoding="utf-8")
    probe = ("import sys\nfrom hooklint.cli import main\ncode = main(sys.argv[1:])\n"
             "print('TORCH=' + ','.join(m for m in sys.modules if m.split('.')[0] == 'torch'))\n")
    proc = subprocess.run([sys.executable, "-c", probe, "check", "model.py", "--output-format", "json", "--no-cache"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert '"origin": "graph"' in proc.stdout, proc.stderr
    assert "TORCH=\n" in proc.stdout


def test_real_package_shapes_the_filter_keeps():
    """Seen in the corpus (pyvene, torchlens, nnsight): names from a star import,
    `re.compile` (a library call named like `model.compile()`), `globals()`, a
    class method of a configuration class based on a library's (pydantic)."""
    source = textwrap.dedent("""\
        import re
        import threading
        from pydantic import BaseModel
        from .constants import *
        from ._split import rebind

        MAPPING = {GPT2Model: gpt2_mapping}
        _ATTR_RE = re.compile("[a-z]+=")
        _LOCK = threading.Lock()
        restored = rebind(_origins.restored, globals())

        class Config(BaseModel):
            HOST: str = "x"

        CONFIG = Config.load()
        model = torch.compile(Config())
    """)
    assert _kept(source)[5:] == [
        "guarded: MAPPING = {GPT2Model: gpt2_mapping}",
        "guarded: _ATTR_RE = re.compile('[a-z]+=')",
        "guarded: _LOCK = threading.Lock()",
        "guarded: restored = rebind(_origins.restored, globals())",
        "class Config(BaseModel):",
        "guarded: CONFIG = Config.load()",
    ]
