"""The graph layer on real project shapes (tests/graph/projects): a Grad-CAM hook
that used to hang the worker, a ResNet-18, a src layout with relative imports
and computed module-level values, a model imported by the training script, a
model only a test fixture or a `__main__` block builds, `pythonpath` from the
configuration.  Each project is copied to a temporary folder and checked as a
user would check it."""

from __future__ import annotations

import json
import shutil
import textwrap
import time
from pathlib import Path

import pytest

from conftest import run_cli
from hooklint.config import Config, ConfigError, config_from_table
from hooklint.findings import NoticeLevel
from hooklint.graph.provider import GraphRun, provide_graph_facts

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
nn = torch.nn

PROJECTS = Path(__file__).resolve().parent / "projects"


@pytest.fixture
def copy_project(tmp_path):
    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(PROJECTS / name, target)
        return target

    return copy


def _check_json(folder: Path, *paths: str, extra: tuple[str, ...] = (), timeout: float = 120):
    started = time.monotonic()
    proc = run_cli("check", *paths, "--output-format", "json", *extra, cwd=folder, timeout=timeout)
    elapsed = time.monotonic() - started
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout), _after_the_import_notice(proc.stderr), elapsed


def _after_the_import_notice(stderr: str) -> str:
    """stderr without the line that says the user's code is imported (tested in test_cli_graph), which
    comes first when there is one."""
    first, _, rest = stderr.partition("\n")
    assert "hooklint: importing" not in rest, stderr
    return rest if first.startswith("hooklint: importing your code") else stderr


def _by_code(findings, code: str):
    return [f for f in findings if f["code"] == code]


def _provide(folder: Path, paths: list[str], config: Config | None = None, timeout: float = 60):
    run = GraphRun()
    facts, notices = provide_graph_facts([str(folder / p) for p in paths], config or Config(root=folder),
                                         use_cache=False, timeout=timeout, run=run)
    return facts, notices, run


# ---------------------------------------------------------------- the Grad-CAM hang


def test_the_gradcam_file_is_analysed_fast_with_the_graphs_hkl102(copy_project):
    """The lead's reproduction: it waited out the 60 s timeout; the legacy hook set
    up in the constructor made fx build `getitem` nodes forever."""
    folder = copy_project("gradcam")
    findings, stderr, elapsed = _check_json(folder, "gradcam_hang.py", extra=("--no-cache", "--timeout", "60"))
    assert elapsed < 60, f"took {elapsed:.0f} s: the timeout was waited out"
    assert "timed out" not in stderr and "error" not in stderr, stderr
    assert [f["location"]["row"] for f in _by_code(findings, "HKL101")] == [23]
    [hkl102] = _by_code(findings, "HKL102")
    assert hkl102["origin"] == "graph"
    assert "on `self.layer4` (Sequential, module `layer4` of CamNet) it binds to ReluBackward0 " \
           "(`return self.relu(self.bn(self.conv(x)) + x)`, line 13 in Block.forward)" in hkl102["message"]


def test_the_gradcam_fact_real_torch():
    """What HKL102 says there, run for real: the legacy hook on `layer4` gets the
    gradient of the last block's ReLU input (same shape as layer4's input,
    other values), not the gradient of layer4's input."""
    namespace: dict = {}
    exec((PROJECTS / "gradcam" / "gradcam_hang.py").read_text(), namespace)  # noqa: S102 - our own fixture
    torch.manual_seed(0)
    net = namespace["CamNet"]()
    seen = {}

    def input_gradient(module, args):  # the real gradient of layer4's input, by a tensor hook
        args[0].register_hook(lambda grad: seen.__setitem__("input", grad))

    net.layer4.register_forward_pre_hook(input_gradient)
    x = torch.randn(2, 3, 8, 8)
    with pytest.warns(FutureWarning, match="non-full backward hook"):
        net(x).sum().backward()
    legacy, full = net.gradients, seen["input"]
    assert net.layer4._backward_hooks and legacy.shape == full.shape
    assert not torch.allclose(legacy, full), "the legacy hook saw the layer's real input gradient"
    wrong = (~torch.isclose(legacy, full)).float().mean().item()
    assert wrong > 0.1


def test_module_backward_hooks_are_set_aside_during_the_analysis_and_put_back():
    from hooklint.graph.build import describer
    from hooklint.graph.trace import analyse_model

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.conv(x) + x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stage = nn.Sequential(Block(), Block())
            self.fc = nn.Linear(4, 2)
            self.stage.register_backward_hook(lambda m, gi, go: None)
            self.fc.register_full_backward_hook(lambda m, gi, go: None)
            self.fc.register_full_backward_pre_hook(lambda m, go: None)

        def forward(self, x):
            return self.fc(self.stage(x).mean((2, 3)))

    net = Net()
    before = (dict(net.stage._backward_hooks), dict(net.fc._backward_hooks), dict(net.fc._backward_pre_hooks))
    started = time.monotonic()
    facts = analyse_model(net, source="Net()", describe=describer({}))
    assert time.monotonic() - started < 30
    assert facts.method == "fx" and facts.module("stage").bound.name == "ReluBackward0"
    assert facts.module("stage").legacy_safe is False
    after = (dict(net.stage._backward_hooks), dict(net.fc._backward_hooks), dict(net.fc._backward_pre_hooks))
    assert after == before and net.stage._is_full_backward_hook is False and net.fc._is_full_backward_hook is True


def test_a_forward_that_never_ends_under_fx_is_bounded_and_run_instead():
    """fx turns `while not isinstance(v, Tensor): v = v[0]` into endless nodes:
    the tracer stops at MAX_TRACE_NODES and the model is analysed by running it."""
    from hooklint.graph.build import describer
    from hooklint.graph.trace import MAX_TRACE_NODES, analyse_model

    class Unwrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            out = (self.fc(x),)
            while not isinstance(out, torch.Tensor):
                out = out[0]
            return out

    started = time.monotonic()
    facts = analyse_model(Unwrap(), source="Unwrap()", describe=describer({}))
    assert time.monotonic() - started < 60
    assert facts.method == "autograd" and f"grew past {MAX_TRACE_NODES} nodes" in facts.fx_error
    assert facts.root.bound.name == "AddmmBackward0"


def test_a_resnet18_with_the_same_hook_finishes_well_under_30_s(copy_project):
    folder = copy_project("resnet_gradcam")
    findings, stderr, elapsed = _check_json(folder, "resnet.py", extra=("--no-cache",))
    assert elapsed < 30, f"a ResNet-18 took {elapsed:.0f} s"
    assert not stderr.strip(), stderr
    [hkl102] = _by_code(findings, "HKL102")
    assert hkl102["origin"] == "graph" and "binds to ReluBackward0 (`return self.relu(out)`, line 33 in " \
                                          "BasicBlock.forward)" in hkl102["message"]
    facts, _notices, _run = _provide(folder, ["resnet.py"])
    [model] = facts[str(folder / "resnet.py")].models
    # ResNet needs (block, layers): the file's own factory builds it
    assert model.source == "factory resnet18()" and len(model.modules) == 68


# ---------------------------------------------------------------- where models come from


def test_a_model_imported_by_the_training_script_gets_the_graphs_answer(copy_project):
    """train.py hooks `model.features` of `ConvNet(args.num_classes)`, a class of
    models.py: built with the argparse default, and linked."""
    folder = copy_project("flat_train")
    findings, stderr, _ = _check_json(folder, ".", extra=("--no-cache",))
    assert not stderr.strip(), stderr
    graph = {(f["filename"], f["location"]["row"]) for f in _by_code(findings, "HKL102") if f["origin"] == "graph"}
    assert graph == {("train.py", 23), ("train.py", 24)}
    static, _, _ = _check_json(folder, ".", extra=("--static-only",))
    assert {f["origin"] for f in _by_code(static, "HKL102")} == {"static"}
    facts, notices, _ = _provide(folder, ["models.py", "train.py"])
    [model] = facts[str(folder / "train.py")].models
    assert model.source == "ConvNet(10)" and model.call_line == 22
    assert not notices, "ConvNet needs arguments, and train.py's call covers it"
    assert facts[str(folder / "models.py")].borrowed == [model]


def test_src_layout_relative_imports_computed_values_and_a_fixture(copy_project):
    folder = copy_project("src_layout")
    paths = ["scripts/gradcam.py", "src/camlib/__init__.py", "src/camlib/_registry.py", "src/camlib/blocks.py",
             "src/camlib/models.py", "tests/conftest.py", "tests/test_model.py"]
    facts, notices, run = _provide(folder, paths)
    assert not notices, [n.message for n in notices]
    script = facts[str(folder / "scripts/gradcam.py")]
    [model] = script.models
    assert model.source == "SmallResNet(num_classes=5)" and model.module("layer4.1").class_name == "Residual"
    fixture = facts[str(folder / "tests/conftest.py")]
    assert [m.source for m in fixture.models] == ["SmallResNet(num_classes=3)"]
    # the package's modules are not built on their own (their classes need arguments): covered
    for path in ("src/camlib/models.py", "src/camlib/blocks.py"):
        assert not facts[str(folder / path)].unanalysed
        assert {m.class_name for m in facts[str(folder / path)].borrowed} == {"SmallResNet"}
    findings, stderr, _ = _check_json(folder, ".", extra=("--no-cache",))
    [hkl102] = _by_code(findings, "HKL102")
    assert hkl102["filename"] == "scripts/gradcam.py" and hkl102["origin"] == "graph"
    assert ", blocks.py:20 in Residual.forward)" in hkl102["message"] and not stderr.strip()


def test_a_fixture_is_the_only_place_that_builds_the_model(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "net.py").write_text(textwrap.dedent("""\
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(width, width), nn.ReLU(inplace=True))
                self.body.register_backward_hook(self.record)

            def record(self, module, grad_input, grad_output):
                self.seen = grad_input[0]

            def forward(self, x):
                return self.body(x)
    """))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_net.py").write_text(textwrap.dedent("""\
        import pytest
        from net import Net

        @pytest.fixture
        def model():
            widths = [6, 12]
            net = Net(widths[0])
            yield net

        def test_forward(model):
            assert model is not None
    """))
    facts, notices, _ = _provide(tmp_path, ["net.py", "tests/test_net.py"])
    assert not notices, [n.message for n in notices]
    [model] = facts[str(tmp_path / "tests/test_net.py")].models
    assert model.source == "fixture model()" and model.module("body").bound.name == "ReluBackward0"
    findings, _, _ = _check_json(tmp_path, ".", extra=("--no-cache",))
    [hkl102] = _by_code(findings, "HKL102")
    assert hkl102["filename"] == "net.py" and hkl102["origin"] == "graph"


def test_a_main_block_example_builds_the_model_and_the_graph_proves_the_hook_safe(copy_project):
    """`VGGish(3, classes)` with `classes = 7` in the `__main__` block.  The hook
    is on a Conv2d (`features[3]`): its legacy grad_input starts with the input
    gradient, so the graph removes the static HKL102."""
    folder = copy_project("main_block")
    facts, notices, _ = _provide(folder, ["cam_model.py"])
    assert not notices
    [model] = facts[str(folder / "cam_model.py")].models
    assert model.source == "VGGish(3, 7)" and model.call_line == 31
    assert model.module("features.3").legacy_safe is True
    graph, _, _ = _check_json(folder, "cam_model.py", extra=("--no-cache",))
    static, _, _ = _check_json(folder, "cam_model.py", extra=("--static-only",))
    assert [f["code"] for f in graph] == ["HKL101"]
    assert sorted(f["code"] for f in static) == ["HKL101", "HKL102"]


def test_the_legacy_hook_on_a_conv_really_gets_the_input_gradient_first():
    """The fact behind the previous test."""
    conv = nn.Conv2d(3, 4, 3, padding=1)
    seen = {}
    conv.register_backward_hook(lambda m, gi, go: seen.__setitem__("legacy", gi[0]))
    conv.register_forward_hook(lambda m, i, o: None)
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    conv(x).sum().backward()
    assert torch.allclose(seen["legacy"], x.grad)


def test_a_configuration_object_with_defaults_builds_the_model(tmp_path):
    (tmp_path / "model.py").write_text(textwrap.dedent("""\
        from dataclasses import dataclass
        import torch.nn as nn

        @dataclass
        class NetConfig:
            width: int = 8
            classes: int = 3

        class Net(nn.Module):
            def __init__(self, config: NetConfig):
                super().__init__()
                self.fc = nn.Linear(config.width, config.classes)

            def forward(self, x):
                return self.fc(x)
    """))
    facts, notices, _ = _provide(tmp_path, ["model.py"])
    assert not notices
    [model] = facts[str(tmp_path / "model.py")].models
    assert model.source == "Net(config=NetConfig())" and model.inputs[0].shape == (2, 8)


def test_a_class_nothing_shows_arguments_for_says_how_to_declare_it(tmp_path):
    (tmp_path / "model.py").write_text(textwrap.dedent("""\
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self, width, depth):
                super().__init__()
                self.fc = nn.Linear(width, depth)

            def forward(self, x):
                return self.fc(x)
    """))
    _facts, notices, _ = _provide(tmp_path, ["model.py"])
    assert [n.message for n in notices] == [
        "graph: not analysed: Net (its constructor needs arguments (width, depth) and the project shows none with "
        "literal values (a call, a factory, a fixture); add a factory to `models` in [tool.hooklint])"]
    assert notices[0].level is NoticeLevel.INFO


# ---------------------------------------------------------------- import roots


MODEL_USING_LIB = """\
import torch.nn as nn
from shapes import WIDTH


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(WIDTH, 2)

    def forward(self, x):
        return self.fc(x)
"""


def test_pythonpath_from_the_configuration(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "shapes.py").write_text("WIDTH = 5\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "net.py").write_text(MODEL_USING_LIB)
    _facts, notices, _ = _provide(tmp_path, ["models/net.py"])
    assert [n.level for n in notices] == [NoticeLevel.SKIP]
    assert "No module named 'shapes'" in notices[0].message
    config = config_from_table({"pythonpath": ["lib"]}, tmp_path, None)
    facts, notices, _ = _provide(tmp_path, ["models/net.py"], config)
    assert not notices and facts[str(tmp_path / "models/net.py")].models[0].inputs[0].shape == (2, 5)
    with pytest.raises(ConfigError, match="`pythonpath` entry `lbi` is not a folder"):
        config_from_table({"pythonpath": ["lbi"]}, tmp_path, None)


def test_the_project_root_is_on_the_path_whatever_the_working_folder(tmp_path):
    """`from mypkg.layers import Block` in tools/export.py, run from anywhere: the
    project root (it has a pyproject.toml) is where `mypkg` is found."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mypkg'\n")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "layers.py").write_text(
        "import torch.nn as nn\n\nclass Block(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(3, 3)\n\n    def forward(self, x):\n        return self.fc(x)\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "export.py").write_text(
        "import torch.nn as nn\nfrom mypkg.layers import Block\n\nclass Wrapped(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.block = Block()\n\n"
        "    def forward(self, x):\n        return self.block(x)\n")
    elsewhere = tmp_path / "tools"
    facts, notices, _ = _provide(tmp_path, ["tools/export.py"], Config(root=elsewhere))
    assert not notices and [m.class_name for m in facts[str(tmp_path / "tools/export.py")].models] == ["Wrapped"]


def test_a_namespace_package_module_with_relative_imports(tmp_path):
    (tmp_path / "setup.py").write_text("")
    pkg = tmp_path / "src" / "nspkg"
    pkg.mkdir(parents=True)
    (pkg / "sizes.py").write_text("HIDDEN = 7\n")
    (pkg / "model.py").write_text(
        "import torch.nn as nn\nfrom .sizes import HIDDEN\n\nclass Net(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.fc = nn.Linear(HIDDEN, 2)\n\n"
        "    def forward(self, x):\n        return self.fc(x)\n")
    facts, notices, _ = _provide(tmp_path, ["src/nspkg/model.py"])
    assert not notices and facts[str(pkg / "model.py")].models[0].inputs[0].shape == (2, 7)


def test_a_package_module_is_imported_under_its_own_name(tmp_path):
    """`import pkg.model`, as the user's code would: the package's __init__ runs
    first (here it imports the module back, a cycle Python resolves), and the
    classes belong to `pkg.model`."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .model import Net\nWIDTH = 3\n")
    (pkg / "model.py").write_text(
        "import torch.nn as nn\nfrom . import WIDTH\n\nclass Net(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.fc = nn.Linear(WIDTH, 2)\n\n"
        "    def forward(self, x):\n        return self.fc(x)\n")
    facts, notices, _ = _provide(tmp_path, ["pkg/model.py"])
    # `from . import WIDTH` runs before __init__ defines it: Python raises this ImportError too
    assert [n.level for n in notices] == [NoticeLevel.SKIP]
    assert "ImportError: cannot import name 'WIDTH' from partially initialized module 'pkg'" in notices[0].message
    (pkg / "__init__.py").write_text("WIDTH = 3\nfrom .model import Net\n")
    facts, notices, _ = _provide(tmp_path, ["pkg/model.py"])
    assert not notices
    [model] = facts[str(pkg / "model.py")].models
    assert model.root.class_qualname == "pkg.model.Net" and model.inputs[0].shape == (2, 3)


def test_files_failing_for_the_same_missing_module_are_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # paths as the user sees them
    (tmp_path / "setup.py").write_text("")
    pkg = tmp_path / "camkit"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .base import BaseCAM\n")
    (pkg / "base.py").write_text("import hooklint_missing_augment_lib\nimport torch.nn as nn\n\n"
                                 "class BaseCAM(nn.Module):\n    def forward(self, x):\n        return x\n")
    for name in ("grad_cam", "score_cam", "layer_cam"):
        (pkg / f"{name}.py").write_text(f"import torch.nn as nn\nfrom .base import BaseCAM\n\n"
                                        f"class {name.title().replace('_', '')}(BaseCAM):\n    pass\n")
    paths = ["camkit/base.py", "camkit/grad_cam.py", "camkit/score_cam.py", "camkit/layer_cam.py"]
    _facts, notices, run = _provide(tmp_path, paths)
    assert len(run.imported) == 4
    assert [(n.path, n.level, n.message) for n in notices] == [(
        "camkit/base.py", NoticeLevel.SKIP,
        "graph analysis skipped for this file and 3 others (camkit/grad_cam.py, camkit/score_cam.py, "
        "camkit/layer_cam.py): importing their definitions failed: ModuleNotFoundError: No module named "
        "'hooklint_missing_augment_lib' (base.py:1)")]


GRADCAM_CLASS = (PROJECTS / "gradcam_class" / "cam.py").read_text()


def test_a_module_passed_to_a_grad_cam_class_or_a_helper_is_linked(tmp_path):
    """`target_layer` is what every call in the file passes: `net.features` (a
    Sequential ending in ReLU: the graph's HKL102) and `net.features[2]` (a
    Conv2d: its legacy grad_input starts with the input gradient, HKL102 goes)."""
    (tmp_path / "cam.py").write_text(GRADCAM_CLASS)
    findings, _, _ = _check_json(tmp_path, "cam.py", extra=("--no-cache",))
    hkl102 = _by_code(findings, "HKL102")
    assert [(f["location"]["row"], f["origin"]) for f in hkl102] == [(21, "graph")]
    assert "(Sequential, module `features` of Net) it binds to ReluBackward0" in hkl102[0]["message"]
    # a call the graph cannot follow: the helper's finding stays static
    (tmp_path / "cam.py").write_text(GRADCAM_CLASS + "attach(nn.Sequential(nn.Linear(2, 2), nn.Tanh()))\n")
    findings, _, _ = _check_json(tmp_path, "cam.py", extra=("--no-cache",))
    assert [(f["location"]["row"], f["origin"]) for f in _by_code(findings, "HKL102")] == [(21, "graph"),
                                                                                        (28, "static")]
