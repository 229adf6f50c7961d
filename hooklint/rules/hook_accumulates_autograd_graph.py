"""HKL349: a forward hook keeps a running total of graph-attached values across forwards."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.graph_accumulators import graph_accumulations


class HookAccumulatesAutogradGraph(Rule):
    """
    ## What it does
    Reports a forward hook (or forward pre-hook) that adds a value computed
    from its `input` or `output` to a running total kept on state that
    outlives the call (`module.total = module.total + output.mean()`,
    `self.stats[name] += x.sum()`, `self.energy.add_(...)` on a buffer),
    without `.detach()` or `torch.no_grad()`, while the same hook counts the calls it sums over
    (`module.n = module.n + 1`, `+= x.shape[0]`): a statistic meant to span
    many forwards.

    ## Why is this bad?
    With gradients enabled (training, or any forward outside `no_grad`) a
    hook's `input` and `output` carry the forward's autograd graph, and
    `total + value` is a new node whose inputs are the old total and this
    forward's graph.  After N forwards the total reaches back through all N
    graphs, which stay alive until the attribute is rebound: memory grows
    with every batch.  A backward through the total after a training step's
    own backward raises `RuntimeError: Trying to backward through the graph
    a second time`, since those graphs' saved tensors were freed.

    ## Known problems
    A hook whose handles the registering code removes after running the
    model, or returns to its caller, collects over one bounded pass (a
    calibration, run under `torch.no_grad()` by convention) and is not
    reported; one left registered for the collector's lifetime is.
    A total that is meant to be differentiated within one step and is reset
    after each backward (a regulariser summed over layers) keeps only one
    step's graph; the rule reports a total only when the hook also counts
    its calls, which such regularisers rarely do.  Whether the model runs
    with gradients enabled is the caller's choice: under `torch.no_grad()`
    nothing is kept.

    ## Example
    ```python
    def firing_rate_hook(module, inputs, output):
        module.total_rate = module.total_rate + output.mean()
        module.n_batches = module.n_batches + 1

    def attach(model):
        for layer in model.modules():
            layer.total_rate = 0
            layer.n_batches = 0
            layer.register_forward_hook(firing_rate_hook)
    ```

    ## Use instead
    ```python
    def firing_rate_hook(module, inputs, output):
        module.total_rate = module.total_rate + output.detach().mean()
        module.n_batches = module.n_batches + 1

    def attach(model):
        for layer in model.modules():
            layer.total_rate = 0
            layer.n_batches = 0
            layer.register_forward_hook(firing_rate_hook)
    ```

    To keep the current batch differentiable (a loss term on this step's
    statistic), detach only the old total:
    `module.total_rate = module.total_rate.detach() + rate`.

    ## Fix safety
    There is no automatic fix: whether the current batch's value must stay
    differentiable is the author's choice.

    ## References
    - [Autograd mechanics: saved tensors](https://pytorch.org/docs/stable/notes/autograd.html#saved-tensors)
    - [`Tensor.detach`](https://pytorch.org/docs/stable/generated/torch.Tensor.detach.html)
    - sinabs commits f93c3b5 and fab6d38 (the synops and firing-rate hooks kept every batch's graph)
    """

    code = "HKL349"
    name = "hook-accumulates-autograd-graph"
    summary = "A forward hook adds graph-attached values to a running total that spans forwards"
    severity = Severity.WARNING
    triggers = ("register_forward_hook", "register_forward_pre_hook", "register_module_forward_hook",
                "register_module_forward_pre_hook")
    # the registration words only: other rules admit these files already, so the rule adds no parse

    VALID: ClassVar[tuple[Invalid | str, ...]] = (
        # detached values carry no graph
        "import torch.nn as nn\n"
        "def rate_hook(module, inputs, output):\n"
        "    module.total = module.total + output.detach().mean()\n"
        "    module.calls = module.calls + 1\n"
        "nn.ReLU().register_forward_hook(rate_hook)\n",
        # the old total is detached: only this batch's graph is kept (sinabs' fix)
        "import torch.nn as nn\n"
        "def rate_hook(module, inputs, output):\n"
        "    module.rate = output.mean()\n"
        "    module.total = module.total.detach() + module.rate\n"
        "    module.calls += 1\n"
        "nn.ReLU().register_forward_hook(rate_hook)\n",
        # computed under no_grad
        "import torch, torch.nn as nn\n"
        "def rate_hook(module, inputs, output):\n"
        "    with torch.no_grad():\n"
        "        module.total += output.mean()\n"
        "    module.calls += 1\n"
        "nn.ReLU().register_forward_hook(rate_hook)\n",
        # Python numbers and comparisons carry no graph
        "import torch.nn as nn\n"
        "class Sparsity:\n"
        "    def __init__(self, layer):\n"
        "        self.zeros, self.seen = 0, 0\n"
        "        layer.register_forward_hook(self.hook)\n"
        "    def hook(self, module, inputs, output):\n"
        "        self.zeros += (output == 0).sum()\n"
        "        self.seen += output.numel()\n"
        "        self.total = self.total + float(output.abs().sum())\n"
        "        self.count = self.count + 1\n",
        # a per-step differentiable penalty that does not count calls
        "import torch.nn as nn\n"
        "class ActivationPenalty:\n"
        "    def __init__(self, model):\n"
        "        self.loss = 0\n"
        "        for m in model.modules():\n"
        "            m.register_forward_hook(self.hook)\n"
        "    def hook(self, module, inputs, output):\n"
        "        self.loss = self.loss + output.abs().mean()\n"
        "    def pop(self):\n"
        "        loss, self.loss = self.loss, 0\n"
        "        return loss\n",
        # a calibration pass: the hooks come off after it (peft's CorDA covariance, auto-round's imatrix)
        "def calibrate(model, batches):\n"
        "    def hook(module, inputs, output):\n"
        "        x = inputs[0].flatten(0, -2)\n"
        "        module.cov = module.cov + x.t() @ x\n"
        "        module.samples += x.shape[0]\n"
        "    handles = []\n"
        "    for m in model.modules():\n"
        "        m.cov, m.samples = 0, 0\n"
        "        handles.append(m.register_forward_hook(hook))\n"
        "    for batch in batches:\n"
        "        model(batch)\n"
        "    for h in handles:\n"
        "        h.remove()\n",
        # the handles go back to the caller, who scopes the pass
        "def imatrix_hooks(model):\n"
        "    def hook(module, inputs, output):\n"
        "        x = inputs[0]\n"
        "        module.imatrix += x.pow(2).sum(0)\n"
        "        module.count += x.shape[0]\n"
        "    return [m.register_forward_hook(hook) for m in model.modules()]\n",
        # the argument rebound to a detached copy
        "import torch.nn as nn\n"
        "def hook(module, inputs, output):\n"
        "    inputs = inputs[0].detach()\n"
        "    module.total += inputs.sum()\n"
        "    module.calls += 1\n"
        "nn.Linear(2, 2).register_forward_hook(hook)\n",
        # a local total, gone when the hook returns
        "import torch.nn as nn\n"
        "def hook(module, inputs, output):\n"
        "    total = 0\n"
        "    n = 0\n"
        "    for row in output:\n"
        "        total = total + row.sum()\n"
        "        n += 1\n"
        "    module.mean = total / n\n"
        "nn.ReLU().register_forward_hook(hook)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def firing_rate_hook(module, inputs, output):\n"
            "    module.total_rate = module.total_rate + output.mean()  # HKL349\n"
            "    module.n_batches = module.n_batches + 1\n"
            "def attach(model):\n"
            "    for layer in model.modules():\n"
            "        layer.total_rate = 0\n"
            "        layer.n_batches = 0\n"
            "        layer.register_forward_hook(firing_rate_hook)\n"
        ),
        # a partial of a module-level pre-hook, `+=` into a dict entry the caller keeps, samples counted
        Invalid(
            "import torch\n"
            "from functools import partial\n"
            "def energy_pre_hook(stats, name, module, args):\n"
            "    x = args[0].flatten(1)\n"
            "    stats[name]['energy'] += torch.linalg.vector_norm(x, dim=1).sum()  # HKL349\n"
            "    stats[name]['samples'] += x.shape[0]\n"
            "def meter(model):\n"
            "    stats = {}\n"
            "    for name, layer in model.named_modules():\n"
            "        stats[name] = {'energy': 0, 'samples': 0}\n"
            "        layer.register_forward_pre_hook(partial(energy_pre_hook, stats, name))\n"
            "    return stats\n"
        ),
        # a bound method, the counter written with `+=`, the total reached through a reshaped input
        Invalid(
            "import torch.nn as nn\n"
            "class SynapticOps:\n"
            "    def __init__(self, layer: nn.Linear):\n"
            "        self.ops = 0\n"
            "        self.batches = 0\n"
            "        layer.register_forward_hook(self.count)\n"
            "    def count(self, module, inputs, output):\n"
            "        x = inputs[0].reshape(-1, module.in_features)\n"
            "        self.ops = x.abs().sum() * module.out_features + self.ops  # HKL349\n"
            "        self.batches += 1\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in graph_accumulations(ctx):
            hook_name = getattr(found.hook, "name", "<hook>")
            counter_line = ctx.span(found.counter)[0]
            yield self.finding(
                ctx, found.statement,
                f"forward hook `{hook_name}` adds `{ast.unparse(found.value)}`, computed from its `{found.source}` "
                f"(part of the forward's autograd graph in training), to the running total `{found.total}`, which outlives the call "
                f"and spans forwards (the hook counts them in `{found.counter_text}`): with gradients enabled the "
                f"total keeps every forward's graph alive until it is rebound (memory grows per batch), and a "
                f"backward through it after a step's own backward raises",
                help="Accumulate a detached value (`output.detach()`, or the update under `torch.no_grad()`); to "
                     "keep this batch differentiable, detach only the old total (`t = t.detach() + value`).",
                related=[Related("the call counter", ctx.display_path, counter_line)],
            )
