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
    return [ast.unparse(stmt).splitlines()[0] for stmt in definitions_only(ast.parse(source)).tree.body]


def test_only_definitions_are_kept():
    kept = _kept(SCRIPT)
    assert kept == [
        "'A training script.'", "import os", "import logging", "from typing import TYPE_CHECKING, Optional",
        "import torch", "import torch.nn as nn", "try:", "if TYPE_CHECKING:",
        "logger = logging.getLogger(__name__)", "HIDDEN = 2 * 8", "SIZES = (HIDDEN, [1, 2], {'a': -1})",
        "Alias = Optional[nn.Module]", "class Net(nn.Module):",
    ]


def test_skipped_statements_and_the_names_only_they_bind():
    sanitized = definitions_only(ast.parse(SCRIPT))
    assert sanitized.skipped_lines == [13, 19, 20, 21, 22, 32, 33, 35, 37, 39]
    # `scaled = device` is inert but reads a name only a dropped statement binds
    assert {"device", "scaled", "net", "step", "f", "DEVICE"} <= sanitized.skipped_names
    assert "Net" not in sanitized.skipped_names and "HIDDEN" in sanitized.kept_names


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
    assert [(c.text, c.line) for c in plan.calls] == [("Block(width=8)", 17)]


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
