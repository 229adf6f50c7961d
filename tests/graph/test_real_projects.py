"""The graph layer on projects shaped like real applications (tests/graph/projects):
a training script that builds its model from argparse defaults and a dictionary
of factories and hands it to an explainer and a K-FAC-like statistics class in
another package; a registry filled by ``@register_model`` and a pruner hooking the
first layer, built in ``main()``; a vision transformer whose patch embedding checks
the image size; a package with relative imports; scripts in a top-level folder.

Each project is copied to a temporary folder and checked with the real CLI, with
and without the graph layer; real torch then shows that what the graph concludes
is what happens (the forward fails with the full hook on one model and not on the
other, the legacy hook's grad_input is the input gradient)."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import run_cli

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

PROJECTS = Path(__file__).resolve().parent / "projects"


@pytest.fixture
def project(tmp_path):
    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(PROJECTS / name, target)
        return target

    return copy


def findings(folder: Path, *extra: str) -> list[dict]:
    proc = run_cli("check", ".", "--isolated", "--output-format", "json", *extra, cwd=folder, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def by_code(items: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for item in items:
        out.setdefault(item["code"], []).append(item)
    return out


def graph_json(folder: Path, *paths: str) -> dict:
    proc = run_cli("graph", *(paths or (".",)), "--isolated", "--output-format", "json", cwd=folder, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


# ---------------------------------------------------------------- argparse script, explainer, K-FAC-like stats


def test_explainer_hook_upgraded_to_hkl403_naming_the_model_and_the_call(project):
    folder = project("argparse_explainer")
    static = by_code(findings(folder, "--static-only"))
    assert [f["filename"] for f in static["HKL405"]] == ["explain/saliency.py"]
    graph = by_code(findings(folder))
    assert "HKL405" not in graph
    (hkl403,) = graph["HKL403"]
    assert (hkl403["filename"], hkl403["location"]["row"]) == ("explain/saliency.py", 7)
    message = hkl403["message"]
    assert "InplaceNet" in message and "features.3" in message and "ReLU(inplace=True)" in message
    assert "train.py:22" in message and "get_network" in message
    assert "--network='inplace'" in message


def test_legacy_stats_hook_gets_the_output_hook_fix_because_of_the_inplace_op(project):
    folder = project("argparse_explainer")
    (static,) = by_code(findings(folder, "--static-only"))["HKL101"]
    (graph,) = by_code(findings(folder))["HKL101"]
    assert static["fix"]["applicability"] == "unsafe"
    assert graph["fix"]["applicability"] == "safe"
    assert "the graph shows an in-place op after the module" in graph["fix"]["message"]
    assert any(edit["content"] == "register_forward_hook" for edit in graph["fix"]["edits"])
    assert "`features.3` (Conv2d, in InplaceNet)" in graph["message"]


def test_explainer_verdict_dropped_when_no_model_of_the_project_has_an_inplace_op(project):
    folder = project("argparse_explainer")
    init = folder / "models" / "__init__.py"
    init.write_text(init.read_text().replace('"inplace": InplaceNet', ""))
    assert "HKL405" in by_code(findings(folder, "--static-only"))
    graph = by_code(findings(folder))
    assert "HKL405" not in graph and "HKL403" not in graph
    (hkl101,) = graph["HKL101"]
    assert hkl101["fix"]["applicability"] == "safe"
    assert hkl101["fix"]["message"].startswith("Replace `register_backward_hook` with `register_full_backward_hook`")


def test_graph_shows_entry_point_variants_links_and_data_inputs(project):
    folder = project("argparse_explainer")
    data = graph_json(folder, "train.py", "explain/saliency.py")
    files = {f["path"]: f for f in data["files"]}
    models = files["train.py"]["models"]
    sources = [m["source"] for m in models]
    assert {m["class_name"] for m in models} == {"PlainNet", "InplaceNet"}
    assert any("argparse defaults: --network='plain'" in s for s in sources)
    assert any("--network='inplace' (an architecture the code it is given to selects)" in s for s in sources)
    assert all(m["inputs"] == [{"dtype": "float32", "shape": [2, 3, 32, 32]}] for m in models)
    assert all("the data code" in m["inputs_origin"] and "cifar10" in m["inputs_origin"] for m in models)
    links = files["explain/saliency.py"]["linked"]
    assert {tuple(link["modules"]) for link in links} == {("features.3",)}
    assert all(link["exact"] and link["complete"] for link in links)
    assert all(link["via"][0].startswith("train.py:22 `Explainer(net, net.features[-2])`") for link in links)


def test_table_says_which_entry_built_the_model_and_through_which_call(project):
    folder = project("argparse_explainer")
    proc = run_cli("graph", "train.py", "explain/curvature.py", "--isolated", cwd=folder, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "hooks on models other files build:" in text
    assert "InplaceNet built in train.py with `net = get_network(args.network, width=args.width)`" in text
    assert "reached through train.py:21 `FactorStats(net)`; each module listed is hooked" in text
    assert "every call in the checked files is linked" in text


def test_real_torch_agrees_with_the_upgraded_and_the_dropped_verdicts(project):
    folder = project("argparse_explainer")
    sys.path.insert(0, str(folder))
    try:
        nets = importlib.import_module("models.nets")
        for cls, fails in ((nets.InplaceNet, True), (nets.PlainNet, False)):
            model = cls(width=8)
            model.features[-2].register_full_backward_hook(lambda m, gi, go: None)
            x = torch.randn(2, 3, 32, 32)
            if fails:
                with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
                    model(x)
            else:
                model(x).sum().backward()
            # the output-tensor pattern HKL101 offers works on both
            model = cls(width=8)
            seen = []

            def hook_output(module, inputs, output):
                output.register_hook(seen.append)

            model.features[-2].register_forward_hook(hook_output)
            model(x).sum().backward()
            assert seen and seen[0].shape == (2, 8, 32, 32)
    finally:
        sys.path.remove(str(folder))
        for name in [n for n in sys.modules if n == "models" or n.startswith("models.")]:
            del sys.modules[name]


# ---------------------------------------------------------------- registry and main(), pruner on the first layer


def test_registry_model_built_in_main_makes_the_legacy_hook_legacy_safe(project):
    folder = project("registry_pruner")
    static = by_code(findings(folder, "--static-only"))
    assert [f["location"]["row"] for f in static["HKL102"]] == [8]
    graph = by_code(findings(folder))
    assert "HKL102" not in graph
    (hkl101,) = graph["HKL101"]
    assert "legacy-safe here" in hkl101["message"] and "`features.0` (Conv2d) of SmallCNN" in hkl101["message"]
    models = {f["path"]: f for f in graph_json(folder, "main.py")["files"]}["main.py"]["models"]
    assert len(models) == 2  # small_cnn (the default) and wide_cnn (its other choice)
    assert all("in main()" in m["source"] for m in models)


def test_real_torch_legacy_grad_input_of_a_first_conv_is_the_input_gradient(project):
    folder = project("registry_pruner")
    sys.path.insert(0, str(folder))
    try:
        models = importlib.import_module("models")
        model = models.create_model("small_cnn")
        seen = []
        list(model.features.children())[0].register_backward_hook(lambda m, gi, go: seen.append(gi[0]))
        x = torch.randn(2, 1, 12, 12, requires_grad=True)
        model(x).sum().backward()
        assert torch.equal(seen[0], x.grad)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("models", None)


# ---------------------------------------------------------------- inputs from the model, imports


def test_vision_transformer_input_comes_from_its_img_size(project):
    folder = project("vit_imgsize")
    models = graph_json(folder)["files"][0]["models"]
    vit = next(m for m in models if m["class_name"] == "TinyViT")
    assert vit["autograd"] and vit["inputs"] == [{"dtype": "float32", "shape": [2, 3, 48, 48]}]
    assert vit["inputs_origin"] == "derived from the model's img_size=48, in_chans=3"


def test_package_with_relative_imports_links_and_upgrades(project):
    folder = project("pkg_relative")
    assert "HKL405" in by_code(findings(folder, "--static-only"))
    graph = by_code(findings(folder))
    assert "HKL405" not in graph
    (hkl403,) = graph["HKL403"]
    assert hkl403["filename"] == "camtool/explain.py" and "block.conv" in hkl403["message"]


def test_scripts_of_a_top_level_folder_import_from_their_own_folder(project):
    folder = project("toplevel_scripts")
    graph = by_code(findings(folder))
    (hkl403,) = graph["HKL403"]
    assert hkl403["filename"] == "experiments/watch.py"
    assert "module `fc1` of Tiny" in hkl403["message"] and "run.py:9 `watch(model.fc1, grads)`" in hkl403["message"]


def test_editing_the_training_loop_reuses_the_facts_editing_the_construction_does_not(project):
    from hooklint.config import config_from_table
    from hooklint.graph.provider import GraphRun, provide_graph_facts

    folder = project("argparse_explainer")
    config = config_from_table({}, folder, None)
    files = [str(folder / "train.py")]
    first = GraphRun()
    provide_graph_facts(files, config, run=first)
    assert first.imported == files
    script = folder / "train.py"
    text = script.read_text()
    # a comment and a change in the loop, below the model's construction: same slice, same lines
    script.write_text(text.replace("optimizer.step()", "optimizer.step()  # one more comment\n        print(epoch)"))
    second = GraphRun()
    facts, _ = provide_graph_facts(files, config, run=second)
    assert second.imported == [] and second.workers_started == 0 and second.cached == files
    assert {m.class_name for m in facts[files[0]].models} == {"PlainNet", "InplaceNet"}
    # the construction itself changed: analysed again
    script.write_text(script.read_text().replace("width=args.width)", "width=args.width * 2)"))
    third = GraphRun()
    provide_graph_facts(files, config, run=third)
    assert third.imported == files


def test_a_comment_in_the_model_file_reuses_the_facts_and_a_moved_line_is_cited_where_it_is(project):
    """Pre-commit after a comment edit of the model classes: every file's facts
    (the entry script's too, which imports them) come from the cache; a comment
    line that moves the code analyses again, and the finding cites the new line."""
    folder = project("argparse_explainer")

    def check() -> tuple[list[dict], str]:
        proc = run_cli("check", ".", "--isolated", "--output-format", "json", cwd=folder, timeout=300)
        assert proc.returncode in (0, 1), proc.stderr
        return json.loads(proc.stdout), proc.stderr

    def hkl403(items: list[dict]) -> str:
        (found,) = by_code(items)["HKL403"]
        return found["message"]

    first, stderr = check()
    assert "importing your code" in stderr
    assert "nets.py:33 in InplaceNet.forward" in hkl403(first)
    nets = folder / "models" / "nets.py"
    text = nets.read_text()
    nets.write_text(text.replace("x = self.features(x)", "x = self.features(x)  # into the in-place ReLU")
                    + "\n# the end\n")
    second, stderr = check()
    assert "importing your code" not in stderr, "a comment cannot change the models: nothing to import"
    assert second == first

    nets.write_text(text.replace("        x = self.features(x)", "        # the features end in place\n"
                                                                   "        x = self.features(x)"))
    third, stderr = check()
    assert "importing your code" in stderr
    message = hkl403(third)
    assert "nets.py:34 in InplaceNet.forward" in message and "(`x = self.features(x)`, nets.py:34" in message
    assert nets.read_text().splitlines()[33].strip() == "x = self.features(x)"

    # the in-place ReLU after the hooked convolution made a plain one: the verdict goes
    nets.write_text(text.replace("nn.Conv2d(width, width, 3, padding=1), nn.ReLU(inplace=True),",
                                 "nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),"))
    fourth, stderr = check()
    assert "importing your code" in stderr
    assert "HKL403" not in by_code(fourth)
