"""Real torch: what HKL201, HKL202 and HKL203 claim, and that their fixes work.

hook-semantics.md section 2: a module backward hook runs when the gradient
w.r.t. the module's inputs (or outputs) is computed, not after AccumulateGrad
wrote the parameters' `.grad`; a post-accumulate-grad hook runs after, with the
parameter as its argument.
"""

from __future__ import annotations

import warnings

import pytest

from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

INDEX = (0, 1, 2, 1)


def freeze_single(index):  # seed 003
    def callback(module, grad_input, grad_output):
        module.weight.grad.data[index] = 0

    return callback


def _quiet_backward(loss):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Full backward hook is firing when ... no inputs require gradients"
        loss.backward()


# ---------------------------------------------------------------- HKL201


def test_full_hook_on_first_layer_raises_on_first_step():
    conv = nn.Conv2d(3, 1, 3)
    conv.register_full_backward_hook(freeze_single(INDEX))
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'data'"):
        _quiet_backward(conv(torch.rand(1, 3, 10, 10)).mean())


def test_full_hook_on_first_layer_edits_the_stale_gradient():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 1, 3)
    x1, x2 = torch.rand(1, 3, 10, 10), torch.rand(1, 3, 10, 10)
    conv(x1).mean().backward()  # step 1, no hook: .grad now exists
    step1 = conv.weight.grad.clone()
    conv.zero_grad(set_to_none=False)
    conv(x2).mean().backward()
    step2 = conv.weight.grad.clone()

    conv.weight.grad = step1.clone()  # as after step 1 when grads are kept
    conv.register_full_backward_hook(freeze_single(INDEX))
    _quiet_backward(conv(x2).mean())
    expected = step1.clone()
    expected[INDEX] = 0  # the hook zeroed the *previous* gradient ...
    expected += step2  # ... and this step's gradient was accumulated on top
    assert torch.allclose(conv.weight.grad, expected)
    assert conv.weight.grad[INDEX] != 0, "the element meant to be frozen still gets a gradient"


def test_full_hook_runs_after_accumulation_when_the_input_requires_grad():
    """The seed's own demo, where it appears to work (an order the engine does not promise)."""
    conv = nn.Conv2d(3, 1, 3)
    conv.register_full_backward_hook(freeze_single(INDEX))
    conv(torch.rand(1, 3, 10, 10, requires_grad=True)).mean().backward()
    assert conv.weight.grad[INDEX] == 0


@pytest.mark.parametrize("register", ["register_backward_hook", "register_full_backward_pre_hook"])
@pytest.mark.parametrize("input_requires_grad", [False, True])
def test_legacy_and_pre_hooks_run_before_accumulation(register, input_requires_grad):
    layer = nn.Linear(3, 2)
    seen = []
    if register == "register_full_backward_pre_hook":
        layer.register_full_backward_pre_hook(lambda m, go: seen.append(m.weight.grad))
    else:
        layer.register_backward_hook(lambda m, gi, go: seen.append(m.weight.grad))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy hook's FutureWarning, raised by the forward
        layer(torch.rand(4, 3, requires_grad=input_requires_grad)).sum().backward()
    assert seen == [None]
    assert layer.weight.grad is not None


def _display_fix_code(source: str) -> str:
    (finding,) = [f for f in lint(source, "HKL201") if f.code == "HKL201"]
    assert finding.fix is not None and finding.fix.applicability.value == "display-only"
    assert finding.fix.edits == ()
    return finding.fix.message.split("\n", 1)[1]


def test_hkl201_displayed_fix_for_seed003_freezes_the_element():
    source = (FIXTURES / "seeds" / "seed003_freeze_element.py").read_text(encoding="utf-8")
    source = source.split("x = torch.rand")[0]  # the definitions and the registration
    code = _display_fix_code(source)
    assert "register_post_accumulate_grad_hook(freeze_single((0, 1, 2, 1)))" in code
    conv = nn.Conv2d(3, 1, 3)
    exec(compile(code, "<hkl201-fix>", "exec"), {"torch": torch, "nn": nn, "conv": conv})
    for _ in range(3):  # a first layer fed plain data, grads reset to None each step
        conv.zero_grad()
        conv(torch.rand(1, 3, 10, 10)).mean().backward()
        assert conv.weight.grad[INDEX] == 0
        assert conv.weight.grad.abs().sum() > 0


def test_hkl201_displayed_fix_keeps_partial_arguments():
    source = (
        "import functools\n"
        "import torch.nn as nn\n"
        "def scale_weight_grad(factor, module, grad_input, grad_output):\n"
        "    module.weight.grad *= factor\n"
        "scaled = nn.Linear(3, 3)\n"
        "scaled.register_full_backward_hook(functools.partial(scale_weight_grad, 0.5))\n"
    )
    code = _display_fix_code(source)
    torch.manual_seed(0)
    scaled = nn.Linear(3, 3)
    x = torch.rand(2, 3)
    scaled(x).sum().backward()
    plain = scaled.weight.grad.clone()
    scaled.zero_grad()
    import functools

    exec(compile(code, "<hkl201-fix>", "exec"), {"functools": functools, "torch": torch, "scaled": scaled})
    scaled(x).sum().backward()
    assert torch.allclose(scaled.weight.grad, plain * 0.5)


class Seed000Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(1, 2)
        self.fc2 = nn.Linear(2, 3)
        self.fc3 = nn.Linear(3, 1)
        with torch.no_grad():  # a dead ReLU after fc1: fc1's weight gradient is all zeros
            self.fc1.bias.fill_(-100.0)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def _seed000_hook_source() -> str:
    text = (FIXTURES / "seeds" / "seed000_conditional_grad_hook.py").read_text(encoding="utf-8")
    start = text.index("def grad_mod(")
    return "import torch\n" + text[start:text.index("for i in range(10):", start)]


def test_seed000_hook_never_edits_the_first_layer():
    net = Seed000Model()
    namespace = {"net": net}
    exec(compile(_seed000_hook_source(), "<seed000>", "exec"), namespace)
    for _ in range(2):
        net.zero_grad()
        _quiet_backward(net(torch.rand(3, 1)).sum())
        assert torch.equal(net.fc1.weight.grad, torch.zeros(2, 1)), "the all-zero gradient was not replaced"


def test_hkl201_displayed_fix_for_seed000_edits_every_layer():
    code = _display_fix_code(_seed000_hook_source())
    net = Seed000Model()
    exec(compile(code, "<hkl201-fix>", "exec"), {"torch": torch, "net": net})
    for _ in range(2):
        net.zero_grad()
        net(torch.rand(3, 1)).sum().backward()
        assert torch.equal(net.fc1.weight.grad, torch.ones(2, 1)), "all zeros became ones, as the hook intends"


def test_mask_tensor_hook_freezes_the_element():
    """The other fix in the help: a tensor hook on the parameter, before accumulation."""
    conv = nn.Conv2d(3, 1, 3)
    mask = torch.ones_like(conv.weight)
    mask[INDEX] = 0
    conv.weight.register_hook(lambda g: g * mask)
    for _ in range(2):
        conv(torch.rand(1, 3, 10, 10)).mean().backward()  # accumulating over two steps
        assert conv.weight.grad[INDEX] == 0


# ---------------------------------------------------------------- HKL202


def _seed000_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1, 2), nn.ReLU(), nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))


def test_none_guard_makes_the_first_layer_hook_a_no_op():
    net = _seed000_model()
    acted = {}

    def grad_mod(module, grad_inputs, grad_outputs):
        if module.weight.grad is None:  # seed 000's "safety measure"
            return None
        acted[module] = acted.get(module, 0) + 1
        module.weight.grad.fill_(1.0)

    first, last = net[0], net[4]
    for layer in (first, last):
        layer.register_full_backward_hook(grad_mod)
    opt = torch.optim.Adam(net.parameters())
    for _ in range(3):
        opt.zero_grad()  # set_to_none=True by default
        _quiet_backward(net(torch.rand(3, 1)).sum())
        opt.step()
    assert first not in acted, "the hook never acted on the first layer"
    assert not torch.equal(first.weight.grad, torch.ones_like(first.weight))
    # on the last layer the inputs need grad and the (engine-ordered) hook happened to act
    assert acted.get(last) == 3


def test_post_accumulate_hook_acts_on_every_layer_every_step():
    net = _seed000_model()
    acted = []

    def grad_mod(param):
        acted.append(param)
        param.grad.fill_(1.0)

    for layer in (net[0], net[4]):
        layer.weight.register_post_accumulate_grad_hook(grad_mod)
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    for _ in range(3):
        opt.zero_grad()
        net(torch.rand(3, 1)).sum().backward()
        assert torch.equal(net[0].weight.grad, torch.ones_like(net[0].weight))
    assert len(acted) == 6


# ---------------------------------------------------------------- HKL203


def test_inplace_edit_of_the_argument_changes_the_weights_not_the_grad():
    layer = nn.Linear(4, 2)
    before = layer.weight.detach().clone()
    x = torch.rand(3, 4)
    layer(x).sum().backward()
    plain_grad = layer.weight.grad.clone()
    layer.zero_grad()

    def halve_grad(p):  # the rule's Example
        p.mul_(0.5)

    layer.weight.register_post_accumulate_grad_hook(halve_grad)
    layer(x).sum().backward()
    assert torch.allclose(layer.weight.detach(), before * 0.5), "the weights were halved"
    assert torch.allclose(layer.weight.grad, plain_grad), "the gradient was not"


def test_item_assignment_on_the_argument_zeroes_a_weight():
    layer = nn.Linear(4, 2)

    def freeze_element(param):
        param[0, 1] = 0.0

    layer.weight.register_post_accumulate_grad_hook(freeze_element)
    layer(torch.rand(3, 4)).sum().backward()
    assert layer.weight[0, 1] == 0
    assert layer.weight.grad[0, 1] != 0


def test_fix_edits_the_gradient():
    layer = nn.Linear(4, 2)
    x = torch.rand(3, 4)
    layer(x).sum().backward()
    plain_grad = layer.weight.grad.clone()
    layer.zero_grad()
    before = layer.weight.detach().clone()

    def halve_grad(p):
        p.grad.mul_(0.5)

    layer.weight.register_post_accumulate_grad_hook(halve_grad)
    layer(x).sum().backward()
    assert torch.allclose(layer.weight.grad, plain_grad * 0.5)
    assert torch.equal(layer.weight.detach(), before)


@pytest.mark.parametrize(
    ("hook", "error", "message"),
    [
        (lambda p: p.grad * 0.5, RuntimeError, "Tensor post accumulate grad hooks should return None"),
        (lambda p: p.grad.mul_(0.5), RuntimeError, "Tensor post accumulate grad hooks should return None"),
        (lambda p: p.data, RuntimeError, "Tensor post accumulate grad hooks should return None"),
        (lambda p: (p.grad,), TypeError, "expected Variable, but hook returned 'tuple'"),
        (lambda p: 1.0, TypeError, "expected Variable, but hook returned 'float'"),
    ],
)
def test_returning_a_value_raises(hook, error, message):
    layer = nn.Linear(4, 2)
    layer.weight.register_post_accumulate_grad_hook(hook)
    with pytest.raises(error, match=message):
        layer(torch.rand(3, 4)).sum().backward()


def test_returning_the_parameter_itself_is_accepted():
    """The PyTorch docs' example returns p (add_ returns its receiver): HKL203 stays quiet."""
    v = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
    v.register_post_accumulate_grad_hook(lambda p: p.add_(p.grad, alpha=-0.01))
    v.backward(torch.tensor([1.0, 2.0, 3.0]))
    assert torch.allclose(v.detach(), torch.tensor([-0.01, -0.02, -0.03]))


def test_optimizer_in_backward_is_a_legitimate_parameter_update():
    """What HKL203 must not report: updating the parameter from its gradient."""
    layer = nn.Linear(4, 2)
    before = layer.weight.detach().clone()
    x = torch.rand(3, 4)

    def sgd_step(p, lr=0.1):
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)

    layer.weight.register_post_accumulate_grad_hook(sgd_step)
    layer(x).sum().backward()
    assert torch.allclose(layer.weight.detach(), before - 0.1 * layer.weight.grad)


_ALL_REDUCE_SCRIPT = """
import multiprocessing, sys
import torch, torch.distributed as dist, torch.nn as nn

def worker(rank, path, queue):
    dist.init_process_group("gloo", init_method="file://" + path, rank=rank, world_size=2)
    torch.manual_seed(rank)
    layer = nn.Linear(2, 2)
    before = layer.weight.detach().clone()

    def sync(param):  # meant to sum the gradients across ranks
        dist.all_reduce(param)

    layer.weight.register_post_accumulate_grad_hook(sync)
    layer(torch.ones(1, 2)).sum().backward()
    # plain lists: tensors would travel as shared-memory handles, racing the worker's exit
    queue.put((rank, before.tolist(), layer.weight.detach().tolist(), layer.weight.grad.tolist()))
    dist.destroy_process_group()

if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")  # the workers start without importing torch again
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(rank, sys.argv[1], queue)) for rank in range(2)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    (before0, after0, grad0), (before1, after1, grad1) = [[torch.tensor(v) for v in r[1:]] for r in results]
    summed = before0 + before1
    assert torch.allclose(after0, summed) and torch.allclose(after1, summed), (after0, after1, summed)
    assert torch.equal(grad0, torch.ones(2, 2)) and torch.equal(grad1, torch.ones(2, 2))
    print("weights summed across ranks, gradients left local")
"""


def test_all_reduce_of_the_argument_sums_the_weights_across_ranks(tmp_path):
    """Two gloo ranks, forked from a subprocess (a few seconds): all_reduce(p)
    in the hook sums the parameters and leaves each rank's gradient alone."""
    import subprocess
    import sys

    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    script = tmp_path / "all_reduce_param.py"
    script.write_text(_ALL_REDUCE_SCRIPT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "rendezvous")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "weights summed across ranks, gradients left local" in done.stdout
