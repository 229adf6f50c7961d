"""Static parts of the graph layer on real projects (no torch, no user code run):
the entry planner's slices and variants, the hooked-parameter summaries, and the
paths of the modules a link lands on."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from hooklint.graph.crossfile import module_paths
from hooklint.graph.entry import EntryPlanner, data_hint, documented_commands, option_strings
from hooklint.graph.facts import ModelFacts, ModuleFacts
from hooklint.graph.sanitize import definitions_only
from hooklint.static.hooked_params import summarize_hooked_params
from hooklint.static.hooks import HookIndex
from hooklint.static.semantic import SemanticModel
from hooklint.static.values import Inference


def plan(source: str, commands=()) -> list:
    tree = ast.parse(textwrap.dedent(source))
    SemanticModel(tree)  # annotates parents and scopes

    def model_callee(call):
        return isinstance(call.func, ast.Name) and call.func.id in ("get_network", "Net", "build")

    planner = EntryPlanner(tree, definitions_only(tree).kept_names, model_callee, lambda name, uses, call: True)
    planner.commands = list(commands)
    return planner.entries(set())


def program_text(entry) -> str:
    return ast.unparse(entry.program)


ARGPARSE_SCRIPT = """
    import argparse
    import torch
    from nets import get_network, Net

    NETWORKS = {"small": Net, "big": Net}
    parser = argparse.ArgumentParser()
    parser.add_argument("--network", default="small", choices=["small", "big", "huge"])
    parser.add_argument("--depth", default=19, type=int)
    parser.add_argument("--data", default="/data/cifar10")
    args = parser.parse_args()
    loader = torch.utils.data.DataLoader(torch.load(args.data))
    if args.depth > 50:
        width = 64
    else:
        width = 16
    net = get_network(args.network, depth=args.depth, width=width).cuda()
    net = net.to("cuda")
    for epoch in range(100):
        train(net, loader)
"""


def test_slice_keeps_the_parser_and_configuration_and_drops_data_and_training():
    (entry,) = plan(ARGPARSE_SCRIPT)
    text = program_text(entry)
    assert entry.binding == "net" and entry.line == 17
    assert "parser.add_argument('--network'" in text and "args = parser.parse_args()" in text
    assert "if args.depth > 50:" in text and "width = 16" in text
    assert "DataLoader" not in text and "torch.load" not in text and "train(" not in text
    assert text.rstrip().endswith("net = get_network(args.network, depth=args.depth, width=width)")  # no .cuda()
    assert dict(entry.options) == {"network": "small", "depth": 19}
    assert [v[0] for v in entry.variants] == [(("network", "big"),), (("network", "huge"),)]


def test_documented_commands_come_first_and_set_the_options_they_name():
    tree = ast.parse(textwrap.dedent(ARGPARSE_SCRIPT))
    readme = "Train with\n\n    python train.py --network big --depth 110 | tee log\n    python other.py --network x\n"
    commands = documented_commands("train.py", [("README.md", readme)], option_strings(tree))
    assert commands == [((("network", "big"), ("depth", "110")), "README.md:3")]
    (entry,) = plan(ARGPARSE_SCRIPT, commands)
    assert entry.variants[0] == ((("network", "big"), ("depth", "110")), "README.md:3")
    assert (("network", "huge"),) in [v[0] for v in entry.variants]


def test_weights_off_and_eval_rewritten():
    entries = plan("""
        import argparse
        import hubconf
        from nets import build
        parser = argparse.ArgumentParser()
        parser.add_argument("--arch", default="resnet18")
        args = parser.parse_args()
        cnn = eval("hubconf.{}(pretrained=True)".format(args.arch))
        net = build(cnn, pretrained=True, weights="IMAGENET1K_V1")
        run(net)
    """)
    entry = next(e for e in entries if e.binding == "net")
    text = program_text(entry)
    assert "__hooklint_eval__('hubconf.{}(pretrained=True)'.format(args.arch))" in text
    assert "build(cnn, pretrained=False, weights=None)" in text
    assert "pretrained=True -> False" in entry.weights and "weights='IMAGENET1K_V1' -> None" in entry.weights


def test_a_construction_needing_a_checkpoint_or_an_unset_name_is_not_planned():
    assert plan("""
        import torch
        from nets import Net
        state = torch.load("model.pt")
        net = Net(state["width"])
        run(net)
    """) == []
    assert plan("""
        from nets import Net
        net = Net(width)
        run(net)
    """) == []


def test_main_function_and_parameter_defaults():
    (entry,) = plan("""
        import argparse
        from nets import Net
        def main(width=32):
            parser = argparse.ArgumentParser()
            parser.add_argument("--depth", type=int, default=3)
            args = parser.parse_args()
            net = Net(args.depth, width)
            run(net)
        if __name__ == "__main__":
            main()
    """)
    text = program_text(entry)
    assert entry.scope == "main" and text.startswith("width = 32")
    assert "in main()" in entry.describe()


def test_data_hints():
    assert data_hint(ast.parse("t = transforms.RandomCrop(32, padding=4)")) == ((32, 32), "`RandomCrop(32)` at line 1")
    assert data_hint(ast.parse("d = datasets.CIFAR100(root)"))[0] == (3, 32, 32)
    assert data_hint(ast.parse("loader = build_imagenet_data(path)"))[0] == (3, 224, 224)
    hint = data_hint(ast.parse("import argparse\np = argparse.ArgumentParser()\n"
                               "p.add_argument('--dataset', default='mnist')\n"))
    assert hint == ((1, 28, 28), "the `--dataset` default ('mnist')")


def summarize(source: str):
    tree = ast.parse(textwrap.dedent(source))
    model = SemanticModel(tree)
    inference = Inference(model)
    return summarize_hooked_params(model, inference, HookIndex(model, inference).registrations)


def test_hooked_params_class_name_filter_and_stored_model():
    summary = summarize("""
        class KFAC:
            def __init__(self, model, lr=0.1):
                self.known = {"Linear", "Conv2d"}
                self.model = model
                self._prepare()
            def _prepare(self):
                for module in self.model.modules():
                    classname = module.__class__.__name__
                    if classname in self.known:
                        module.register_backward_hook(self.save)
            def save(self, module, grad_input, grad_output):
                pass
    """)
    (hook,) = summary.hooks
    assert (hook.ref.callee.qualname, hook.ref.param, hook.ref.position) == ("KFAC", "model", 0)
    assert [s.kind for s in hook.steps] == ["each"] and hook.classes == ("Linear", "Conv2d") and hook.exact


def test_hooked_params_through_super_and_list_of_children_and_passes():
    summary = summarize("""
        from helpers import watch
        class Base:
            def __init__(self, model):
                self.model = model
        class Saliency(Base):
            def __init__(self, model):
                super().__init__(model)
                first = list(self.model.features._modules.items())[0][1]
                first.register_backward_hook(self.save)
            def save(self, module, grad_input, grad_output):
                self.grad = grad_input[0]
        def explain(model, layer):
            return Saliency(model)
        def attach(model):
            for name, child in model.named_children():
                if child.skip:
                    continue
                watch(child)
    """)
    (hook,) = summary.hooks
    assert hook.ref.callee.qualname == "Saliency"
    assert [(s.kind, s.value) for s in hook.steps] == [("attr", "features"), ("children", None), ("pick", 0)]
    passes = {(p.ref.callee.qualname, p.ref.param): p for p in summary.passes}
    assert passes[("explain", "model")].target == "<local>.Saliency" or passes[("explain", "model")].target_node
    assert not passes[("attach", "model")].exact  # `if child.skip:` is about the module: may be hooked


def _model(*paths: tuple[str, str, tuple[str, ...]]) -> ModelFacts:
    modules = tuple(ModuleFacts(path, cls, f"x.{cls}", calls=1, bases=bases) for path, cls, bases in paths)
    return ModelFacts("Net", None, None, "Net()", modules=modules)


def test_module_paths_negative_index_pick_and_class_filters():
    from hooklint.static.hooked_params import Step

    model = _model(("", "Net", ()), ("features", "Sequential", ()), ("features.0", "Conv2d", ("_ConvNd",)),
                   ("features.1", "ReLU", ()), ("features.10", "QuantConv", ("Conv2d", "_ConvNd")),
                   ("head", "Linear", ()))
    assert module_paths(model, [Step("attr", "features"), Step("index", -1)], None) == (["features.10"], True)
    assert module_paths(model, [Step("attr", "features"), Step("children"), Step("pick", 0)], None) == (
        ["features.0"], True)
    paths, exact = module_paths(model, [Step("each")], ("Conv2d",))
    assert sorted(paths) == ["features.0", "features.10"] and exact  # a subclass passes `isinstance`
    assert module_paths(model, [Step("attr", "missing")], None) == ([], False)


def test_an_option_selecting_code_with_unknown_values_leaves_the_entry_open():
    (entry,) = plan("""
        import argparse
        from nets import build
        parser = argparse.ArgumentParser()
        parser.add_argument("--arch", default="resnet18")
        args = parser.parse_args()
        net = build(args.arch)
        run(net)
    """)
    # `build` is not read here: its other architectures cannot be listed, so the
    # models built are not all the configurations (no "every module" claim from them)
    assert entry.variants == () and entry.open_options == ("arch",)
