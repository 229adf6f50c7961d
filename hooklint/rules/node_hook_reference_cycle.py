"""HKL329: a hook on a tensor's grad_fn refers to an object that keeps the tensor."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.node_hook_cycles import TRIGGER_PATTERN, TRIGGERS, NodeHookCycle, node_hook_cycles


class NodeHookReferenceCycle(Rule):
    """
    ## What it does
    Reports a hook registered on the autograd Node of a tensor
    (`t.grad_fn.register_hook`, `register_prehook`, `node = t.grad_fn`
    first) whose handle is dropped, when the hook refers to an object
    (`functools.partial(fn, self)`, a closure or lambda that uses `self`, a
    bound method `self.on_grad`) that itself keeps the tensor: `self.cache
    = t`, `self.outputs.append(t)`, `setattr(self, name, t)`, or a method
    returning the tensor under a caching decorator (`@cached`,
    `functools.cached_property`, `lru_cache`) that stores it on the object.

    ## Why is this bad?
    A tensor keeps its `grad_fn` in C++ and the Node keeps its hooks in
    C++: Python's cycle collector follows neither link.  The chain object
    -> tensor -> Node -> hook -> object is then a reference cycle
    `gc.collect()` cannot see: when the program drops the object, the
    object, the tensor, its whole autograd graph and everything the object
    holds stay in memory for the life of the process.  With a `weakref`,
    with the handle kept and removed, or with a hook on a leaf tensor
    (whose hooks live in a Python dict the collector traverses) the same
    object is freed (torch 2.13, tests/behaviour/test_node_hook_cycles.py).
    gpytorch's prediction strategies hooked each cached tensor's `grad_fn`
    with a partial of the strategy itself, so every fantasy model stayed
    alive (cornellius-gp/gpytorch#2631).

    ## Known problems
    Only what the registering function (and the functions it is nested
    in) shows is followed, plus methods of the same class returning its
    result under a caching decorator: an object that keeps the tensor in
    a caller (`t = add_hook(t, owner); owner.cache = t`) is not seen, nor
    is a hook on a non-leaf tensor (`t.register_hook`), which is kept by
    its Node the same way (whether a tensor is a leaf is not known from
    the code).  A Node kept only through its Python object (an
    `AccumulateGrad` node from `p.expand_as(p).grad_fn.next_functions[0][0]`
    appended to a list) is not reported: the collector traverses a Node
    whose Python object is its only owner, and torch 2.13 frees that cycle.  A class with a method that empties or rebinds
    the attribute keeping the Node (`destroy()`, `reset()`) is taken to
    break the cycle and is not reported.  Whether the cycle matters
    depends on how often such objects are made and dropped: the message
    says so.

    ## Example
    ```python
    import functools


    def clear_cache(owner, *args):
        owner.cache = None


    class Strategy:
        def cache_tensor(self, t):
            self.cache = t
            t.grad_fn.register_hook(functools.partial(clear_cache, self))
    ```

    ## Use instead
    ```python
    import functools
    import weakref


    def clear_cache(owner_ref, *args):
        owner = owner_ref()
        if owner is not None:
            owner.cache = None


    class Strategy:
        def cache_tensor(self, t):
            self.cache = t
            t.grad_fn.register_hook(functools.partial(clear_cache, weakref.ref(self)))
    ```

    ## Fix safety
    There is no automatic fix: refer to the object through a
    `weakref.ref`, or keep the handle and remove it when the object is
    done.

    ## References
    - [`torch.autograd.graph.Node.register_hook`](https://pytorch.org/docs/stable/generated/torch.autograd.graph.Node.register_hook.html)
    - [`gc`: the cycle collector only sees objects that report their references](https://docs.python.org/3/library/gc.html)
    - cornellius-gp/gpytorch#2631
    """

    code = "HKL329"
    name = "node-hook-reference-cycle"
    summary = "A hook on a tensor's grad_fn refers to an object that keeps the tensor: a cycle the garbage collector cannot free"
    severity = Severity.WARNING
    triggers = TRIGGERS
    trigger_pattern = TRIGGER_PATTERN

    VALID: ClassVar[tuple[str, ...]] = (
        # a weak reference breaks the cycle
        "import functools, weakref\n"
        "def clear(ref, *args):\n"
        "    pass\n"
        "class S:\n"
        "    def cache_tensor(self, t):\n"
        "        self.cache = t\n"
        "        t.grad_fn.register_hook(functools.partial(clear, weakref.ref(self)))\n",
        # the handle is kept: the owner can remove the hook
        "class S:\n"
        "    def track(self, p):\n"
        "        acc = p.expand_as(p).grad_fn.next_functions[0][0]\n"
        "        self.handle = acc.register_hook(self.on_grad)\n"
        "        self.acc = acc\n"
        "    def on_grad(self, *args):\n"
        "        pass\n",
        # the object does not keep the tensor or the Node
        "class S:\n"
        "    def watch(self, t):\n"
        "        t.grad_fn.register_hook(self.on_grad)\n"
        "        return t.detach()\n"
        "    def on_grad(self, *args):\n"
        "        pass\n",
        # AccumulateGrad nodes kept only through their Python objects: collected
        "class ZeroOptimizer:\n"
        "    def hook_params(self, params):\n"
        "        self.grad_accs = []\n"
        "        for p in params:\n"
        "            acc = p.expand_as(p).grad_fn.next_functions[0][0]\n"
        "            acc.register_hook(lambda *a: self.reduce(p))\n"
        "            self.grad_accs.append(acc)\n",
        # a method of the class lets the tensors go
        "class S:\n"
        "    def run(self, layers, x):\n"
        "        self.outs = []\n"
        "        for layer in layers:\n"
        "            x = layer(x)\n"
        "            x.grad_fn.register_hook(lambda *a: self.step())\n"
        "            self.outs.append(x)\n"
        "        return x\n"
        "    def step(self):\n"
        "        pass\n"
        "    def release(self):\n"
        "        self.outs.clear()\n",
        # a hook on a leaf tensor lives in a Python dict the collector sees
        "class S:\n"
        "    def watch(self, w):\n"
        "        self.w = w\n"
        "        w.register_hook(lambda g: self.record(g))\n"
        "    def record(self, g):\n"
        "        pass\n",
        # a cached result that is not the hooked tensor
        "import functools\n"
        "class S:\n"
        "    @functools.cached_property\n"
        "    def summary(self):\n"
        "        out = self.compute()\n"
        "        out.grad_fn.register_hook(self.on_grad)\n"
        "        return out.detach()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import functools\n"
            "def clear_cache(owner, *args):\n"
            "    owner.cache = None\n"
            "class Strategy:\n"
            "    def cache_tensor(self, t):\n"
            "        self.cache = t\n"
            "        t.grad_fn.register_hook(functools.partial(clear_cache, self))  # HKL329\n"
        ),
        Invalid(
            "class Recorder:\n"
            "    def record(self, model, x):\n"
            "        self.outputs = []\n"
            "        for layer in model:\n"
            "            x = layer(x)\n"
            "            node = x.grad_fn\n"
            "            def on_backward(*unused):\n"
            "                self.seen += 1\n"
            "            node.register_hook(on_backward)  # HKL329\n"
            "            self.outputs.append(x)\n"
            "        return x\n"
        ),
        Invalid(
            "from functools import lru_cache\n"
            "class Predictor:\n"
            "    @property\n"
            "    @lru_cache(maxsize=None)\n"
            "    def mean_cache(self):\n"
            "        return self._solve()\n"
            "    def _solve(self):\n"
            "        res = self.kernel.solve(self.labels)\n"
            "        res.grad_fn.register_prehook(lambda grad_outputs: self.reset())  # HKL329\n"
            "        return res\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        if not any(word in ctx.text for word in TRIGGERS):
            return
        for cycle in node_hook_cycles(ctx.model.calls_of_method("register_hook", "register_prehook")):
            yield self._finding(ctx, cycle)

    def _finding(self, ctx: FileContext, cycle: NodeHookCycle) -> Finding:
        message = (
            f"the hook `{cycle.hook_text[:60]}` on the autograd Node `{cycle.node_text}` refers to "
            f"`{cycle.owner}`, and {cycle.kept_how}: a Node keeps its hooks outside what Python's "
            f"garbage collector can see, so `{cycle.owner}` -> Node -> hook -> `{cycle.owner}` is a "
            f"cycle `gc` never frees; with the handle dropped, each such object stays in memory with "
            f"its autograd graph for the life of the process (a leak when such objects are made and "
            f"dropped repeatedly)"
        )
        return self.finding(
            ctx, cycle.call, message,
            help=f"refer to `{cycle.owner}` through `weakref.ref(...)` in the hook, or keep the handle and "
                 f"remove it when `{cycle.owner}` is done with the Node",
            related=[Related(f"`{cycle.owner}` keeps the Node here", ctx.display_path, ctx.span(cycle.kept)[0])],
        )
