"""Instrumentation must not change the program: same numbers, same hook and
handle behaviour, same warnings; everything put back when it ends; no user
tensor kept alive; safe to nest and to use from several threads."""

from __future__ import annotations

import gc
import threading
import warnings
import weakref

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import hooklint  # noqa: E402
from hooklint.runtime.core import RUNTIME  # noqa: E402

pytestmark = pytest.mark.torch


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc1 = nn.Linear(4 * 6 * 6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def _train(steps: int = 4):
    """A small training run with hooks of every kind, some of them buggy (they
    edit stale gradients, modify their arguments in place), so that the
    instrumentation is busy; returns every loss, gradient and parameter."""
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    scale = torch.full_like(net.fc2.weight, 0.5)

    def stale_edit(module, grad_input, grad_output):  # HKL201: runs before conv's accumulation
        if module.weight.grad is not None:
            module.weight.grad.mul_(0.9)

    def doubled_input_grad(module, grad_input, grad_output):
        return (grad_input[0] * 2,)

    def mix_output(module, inputs, output):
        return output * 0.7 + 0.3 * output.roll(1, 0)

    def in_place(grad):  # HKL401
        grad.mul_(1.1)

    net.conv.register_full_backward_hook(stale_edit)
    net.fc1.register_full_backward_hook(doubled_input_grad)
    net.fc1.register_forward_hook(mix_output)
    net.fc2.register_forward_pre_hook(lambda m, inp: (inp[0] * 1.5,))
    net.fc2.weight.register_hook(lambda g: g * scale)
    net.fc1.bias.register_hook(in_place)

    def clip(param):
        param.grad.clamp_(-0.1, 0.1)

    net.fc2.bias.register_post_accumulate_grad_hook(clip)
    net.bn.register_full_backward_pre_hook(lambda m, go: (go[0] * 0.5,))

    record = []
    data = torch.rand(steps, 8, 3, 8, 8)
    target = torch.rand(steps, 8, 3)
    for step in range(steps):
        # gradients accumulate over two micro-batches, then step
        opt.zero_grad(set_to_none=step % 2 == 0)
        for half in (data[step, :4], data[step, 4:]):
            loss = ((net(half) - target[step, : len(half)]) ** 2).mean()
            loss.backward()
            record.append(loss.detach().clone())
        record.extend(p.grad.detach().clone() for p in net.parameters())
        opt.step()
    record.extend(p.detach().clone() for p in net.parameters())
    record.extend(b.detach().clone() for b in net.buffers())
    return record


def test_training_numbers_bit_identical():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = _train()
        with hooklint.instrument(select=["ALL"]) as session:
            instrumented = _train()
    assert {f.code for f in session.findings} >= {"HKL201", "HKL401"}, "the instrumentation was at work"
    assert len(plain) == len(instrumented)
    for a, b in zip(plain, instrumented):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.view(torch.int32) if a.dtype == torch.float32 else a,
                           b.view(torch.int32) if b.dtype == torch.float32 else b)


def _api_snapshot():
    from torch.nn.modules import module as module_mod
    from torch.utils import hooks as torch_hooks

    names = [n for n in vars(module_mod) if n.startswith("register_module_")]
    snapshot = {("module_mod", n): getattr(module_mod, n) for n in names}
    for n in ("register_forward_pre_hook", "register_forward_hook", "register_backward_hook",
              "register_full_backward_hook", "register_full_backward_pre_hook", "_maybe_warn_non_full_backward_hook"):
        snapshot[("Module", n)] = vars(nn.Module)[n]
    for n in ("register_hook", "register_post_accumulate_grad_hook", "backward"):
        snapshot[("Tensor", n)] = vars(torch.Tensor)[n]
    snapshot[("RemovableHandle", "remove")] = vars(torch_hooks.RemovableHandle)["remove"]
    snapshot[("BackwardHook", "in")] = vars(torch_hooks.BackwardHook)["setup_input_hook"]
    snapshot[("BackwardHook", "out")] = vars(torch_hooks.BackwardHook)["setup_output_hook"]
    snapshot[("autograd", "backward")] = torch.autograd.backward
    snapshot[("autograd", "grad")] = torch.autograd.grad
    snapshot[("warnings", "warn")] = warnings.warn
    snapshot[("Parameter", "grad")] = vars(nn.Parameter).get("grad")
    return snapshot


def test_deactivation_restores_every_api_and_unwraps_hooks():
    before = _api_snapshot()
    layer = nn.Linear(3, 2)

    def forward_hook(m, i, o):
        return None

    def backward_hook(m, gi, go):
        m.weight.grad  # read: hooklint installs a helper hook on the weight

    def tensor_hook(g):
        return g

    with hooklint.instrument() as session:
        assert _api_snapshot() != before
        layer.register_forward_hook(forward_hook)
        layer.register_full_backward_hook(backward_hook)
        layer.weight.register_hook(tensor_hook)
        layer(torch.rand(2, 3)).sum().backward()
        assert any(hasattr(h, "__hooklint_record__") for h in layer._backward_hooks.values())
    assert not session.active
    after = _api_snapshot()
    assert all(after[key] is before[key] for key in before), [k for k in before if after[k] is not before[k]]
    assert "grad" not in vars(nn.Parameter)
    assert list(layer._forward_hooks.values()) == [forward_hook]
    assert list(layer._backward_hooks.values()) == [backward_hook]
    assert list(layer.weight._backward_hooks.values()) == [tensor_hook]  # hooklint's helper hook is gone
    assert not RUNTIME.active and not RUNTIME.records and not RUNTIME.originals


def test_no_strong_references_to_user_objects():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hooklint.instrument(select=["ALL"]) as session:
            refs = []

            def build_and_run():
                net = Net()
                x = torch.rand(2, 3, 8, 8, requires_grad=True)

                def edit(module, gi, go):  # reads .grad early (HKL201 machinery engaged)
                    module.weight.grad

                net.conv.register_full_backward_hook(edit)
                net.fc1.register_backward_hook(lambda m, gi, go: None)
                x.register_hook(lambda g: g * 2)
                net.fc2.weight.register_post_accumulate_grad_hook(lambda p: None)
                h = x.register_hook(lambda g: None)
                out = net(x).sum()
                h.remove()
                out.backward()
                refs.extend(weakref.ref(obj) for obj in (net, x, net.conv.weight, net.fc2.weight, out))

            build_and_run()
            gc.collect()
            assert all(r() is None for r in refs), "instrumentation kept a user object alive"
    assert session.findings  # it did observe things


def test_handles_and_hook_semantics_unchanged():
    with hooklint.instrument():
        layer = nn.Linear(3, 2)
        x = torch.rand(4, 3, requires_grad=True)
        h = layer.register_forward_hook(lambda m, i, o: o * 0 + 1)
        assert isinstance(h, torch.utils.hooks.RemovableHandle)
        assert torch.equal(layer(x), torch.ones(4, 2))
        h.remove()
        assert not torch.equal(layer(x), torch.ones(4, 2))
        with layer.register_forward_pre_hook(lambda m, inp: inp[0] * 0):  # a single value is wrapped
            assert torch.equal(layer(x), layer.bias.expand(4, 2))
        assert not layer._forward_pre_hooks
        kw = layer.register_forward_hook(lambda m, args, kwargs, out: out + 1, with_kwargs=True)
        assert torch.equal(layer(x), x @ layer.weight.T + layer.bias + 1)
        kw.remove()
        t = x.register_hook(lambda g: g * 3)
        layer(x).sum().backward()
        assert torch.allclose(x.grad, layer.weight.sum(0).expand(4, 3) * 3)
        t.remove()
        x.grad = None
        seen = []
        full = layer.register_full_backward_hook(lambda m, gi, go: seen.append(len(gi)) or (gi[0] * 0,))
        layer(x).sum().backward()
        assert seen == [1] and torch.equal(x.grad, torch.zeros(4, 3))
        full.remove()


def test_torch_warnings_keep_their_location():
    def run():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seq = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
            seq.register_backward_hook(lambda m, gi, go: None)
            first = nn.Linear(3, 2)
            first.register_full_backward_hook(lambda m, gi, go: None)

            def user_hook(g):
                warnings.warn("from a user hook", UserWarning, stacklevel=2)

            x = torch.rand(2, 3, requires_grad=True)
            x.register_hook(user_hook)
            seq(x).sum().backward()
            first(torch.rand(2, 3)).sum().backward()
        return [(type(w.message), str(w.message), w.filename, w.lineno) for w in caught]

    plain = run()
    with hooklint.instrument():
        instrumented = run()
    assert len(plain) == 3
    assert plain == instrumented


def test_nested_sessions():
    before = _api_snapshot()
    with hooklint.instrument(select=["HKL401"]) as outer:
        a = torch.ones(3, requires_grad=True)
        a.register_hook(lambda g: g.mul_(2))
        (a * 2).sum().backward()
        with hooklint.instrument(select=["HKL401"]) as inner:
            b = torch.ones(3, requires_grad=True)
            b.register_hook(lambda g: g.add_(1))  # INNER
            (b * 2).sum().backward()
        assert RUNTIME.active == 1 and _api_snapshot() != before
        c = torch.ones(3, requires_grad=True)
        c.register_hook(lambda g: g.sub_(1))
        (c * 2).sum().backward()
    inner_line = next(n for n, line in enumerate(open(__file__), start=1) if "# INNER" in line and "lambda" in line)
    assert [f.location.row for f in inner.findings] == [inner_line]
    assert len(outer.findings) == 3
    assert _api_snapshot() == before


def test_sessions_in_several_threads():
    barrier = threading.Barrier(3)
    results: dict[str, object] = {}

    def with_session(name, make_bug):
        with hooklint.instrument(select=["ALL"]) as session:
            barrier.wait()
            for _ in range(5):
                make_bug()
        results[name] = sorted({f.code for f in session.findings})

    def inplace_bug():
        x = torch.ones(4, requires_grad=True)
        x.register_hook(lambda g: g.mul_(3))
        (x ** 2).sum().backward()

    def late_hook_bug():
        net = nn.Linear(3, 2)
        loss = net(torch.rand(2, 3)).sum()
        net.register_full_backward_hook(lambda m, gi, go: None)
        loss.backward()

    def no_session():
        barrier.wait()
        x = torch.ones(4, requires_grad=True)
        hook = lambda g: g.mul_(3)  # noqa: E731
        x.register_hook(hook)
        (x ** 2).sum().backward()
        results["unwatched"] = list(x._backward_hooks.values()) == [hook]

    threads = [threading.Thread(target=with_session, args=("a", inplace_bug)),
               threading.Thread(target=with_session, args=("b", late_hook_bug)),
               threading.Thread(target=no_session)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == {"a": ["HKL401"], "b": ["HKL302"], "unwatched": True}
    assert not RUNTIME.active


def test_torch_internal_registrations_are_not_the_users():
    with hooklint.instrument(select=["ALL"]) as session:
        conv = nn.Conv2d(3, 3, 3)
        nn.utils.weight_norm(conv)  # registers a forward pre-hook from inside torch
        nn.utils.weight_norm(nn.Conv2d(3, 3, 3))
        hooks = list(conv._forward_pre_hooks.values())
        conv(torch.rand(1, 3, 5, 5)).sum().backward()
    assert not any(hasattr(h, "__hooklint_record__") for h in hooks)
    assert session.findings == []
