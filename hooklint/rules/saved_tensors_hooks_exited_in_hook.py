"""HKL321: a saved-tensors-hooks context exited from inside its pack or unpack hook."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.saved_tensor_scopes import TRIGGERS, HookSite, PopPath, SavedTensorScopes


class SavedTensorsHooksExitedInHook(Rule):
    """
    ## What it does
    Reports a pack or unpack hook of `torch.autograd.graph.saved_tensors_hooks`
    (or of `save_on_cpu`, a subclass, `_push_saved_tensors_default_hooks`)
    that exits a saved-tensors-hooks context: it calls `ctx.__exit__(...)`
    or `torch._C._autograd._pop_saved_tensors_default_hooks()`, itself or
    through functions and methods of the file it calls.  The usual shape is
    a scope that outlives its `with` block ("exit once none of my tensors
    is alive any more") and checks that condition from its own hooks.

    The same exit from any other code that runs during `backward()` (a
    tensor or autograd-Node hook, a post-accumulate-grad hook, a module
    backward hook, the `backward` of a custom `autograd.Function`) is
    reported too.

    ## Why is this bad?
    `__exit__` pops whatever pair of hooks is on top of the thread's stack,
    and the hooks run at moments when that stack is not the one the scope
    was pushed on:

    - an **unpack** hook runs during `backward()`, under a copy of the
      stack that autograd puts back when the backward ends.  The pop does
      not remove the hooks from the thread that entered them: they stay
      installed and pack every later forward, while the object believes it
      has exited.  A second pop in the same backward takes another
      library's hooks off the copy, and one more fails with
      `RuntimeError: is_initialized && !tls.stack.empty() INTERNAL ASSERT
      FAILED` (torch 2.13);
    - any other hook that runs during `backward()` exits on that same copy,
      with the same result.  Pairing it with an enter in a backward pre-hook
      does not help: autograd puts the stack back before each node it runs,
      so the pre-hook's push is gone when the backward hook pops (torch
      2.13 raises the internal assert above);
    - a **pack** hook runs in the middle of an operation that is saving its
      tensors: the pop takes effect at once, so the operation's remaining
      saved tensors skip the hooks (they are kept as they are: not
      offloaded, not recomputed).

    Older torch releases could crash with a segmentation fault when a
    scope was exited inside its own hooks (pytorch/pytorch#130734).

    ## Known problems
    Only pops this file can see are followed: a context made in another
    file, or a hook that reaches the pop through an object of unknown
    class, is not reported.  A pop guarded by a switch function of the
    file that always answers `False` (a workaround switched off until a
    torch release fixes it) is not reported; any other guard is taken as
    able to pass.  A function that pushes and pops the same context itself
    (`ctx.__enter__()` ... `ctx.__exit__()`) is balanced and not reported.

    ## Example
    ```python
    import torch

    class Scope:
        def __init__(self):
            self.ctx = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
            self.exited = False

        def pack(self, t):
            return t.detach()

        def unpack(self, t):
            if not self.exited:
                self.exited = True
                self.ctx.__exit__(None, None, None)
            return t
    ```

    ## Use instead
    ```python
    import torch

    class Scope:
        def __init__(self):
            self.ctx = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
            self.exit_pending = False

        def pack(self, t):
            return t.detach()

        def unpack(self, t):
            self.exit_pending = True  # the caller exits, after backward()
            return t

        def exit_if_pending(self):
            if self.exit_pending:
                self.exit_pending = False
                self.ctx.__exit__(None, None, None)
    ```

    ## Fix safety
    There is no automatic fix: decide in the hook, exit outside it (in the
    code that entered the context, after the forward or the backward, or
    in a `with` block around the region).

    ## References
    - [`torch.autograd.graph.saved_tensors_hooks`](https://pytorch.org/docs/stable/autograd.html#torch.autograd.graph.saved_tensors_hooks)
    - [pytorch/pytorch#130734](https://github.com/pytorch/pytorch/issues/130734): calling `saved_tensors_hooks.__exit__` inside an unpack hook
    - returnn's `gradient_checkpoint_scope` (rwth-i6/returnn#1581), fixed by no longer exiting from the hooks
    """

    code = "HKL321"
    name = "saved-tensors-hooks-exited-in-hook"
    summary = "A saved-tensors-hooks context exited from inside a pack or unpack hook, or from other code that runs during backward"
    severity = Severity.ERROR
    triggers = TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # a `with` block inside the hook pushes and pops in order
        "import torch\n"
        "def pack(t):\n"
        "    with torch.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x):\n"
        "        return t * 1\n"
        "ctx = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)\n",
        # balanced by hand in the same function
        "import torch\n"
        "inner = torch.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x)\n"
        "def unpack(t):\n"
        "    inner.__enter__()\n"
        "    try:\n"
        "        return t * 1\n"
        "    finally:\n"
        "        inner.__exit__(None, None, None)\n"
        "ctx = torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack)\n",
        # the exit is deferred to the caller
        "import torch\n"
        "class Scope:\n"
        "    def __init__(self):\n"
        "        self.ctx = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)\n"
        "        self.pending = False\n"
        "    def pack(self, t):\n"
        "        return t\n"
        "    def unpack(self, t):\n"
        "        self.pending = True\n"
        "        return t\n"
        "    def after_backward(self):\n"
        "        if self.pending:\n"
        "            self.ctx.__exit__(None, None, None)\n",
        # switched off until torch allows it
        "import torch\n"
        "def _can_exit_inside_hooks():\n"
        "    return False\n"
        "class Scope:\n"
        "    def __init__(self):\n"
        "        self.ctx = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)\n"
        "    def pack(self, t):\n"
        "        if _can_exit_inside_hooks():\n"
        "            self.ctx.__exit__(None, None, None)\n"
        "        return t\n"
        "    def unpack(self, t):\n"
        "        return t\n",
        # a forward pre-hook / forward hook pair is not a saved-tensor hook
        "import torch\n"
        "noop = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)\n"
        "def attach(module):\n"
        "    module.register_forward_pre_hook(lambda *a: noop.__enter__())\n"
        "    module.register_forward_hook(lambda *a: noop.__exit__(), always_call=True)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class Scope:\n"
            "    def __init__(self):\n"
            "        self.scope = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)\n"
            "        self.done = False\n"
            "    def _release(self):\n"
            "        if not self.done:\n"
            "            self.done = True\n"
            "            self.scope.__exit__(None, None, None)\n"
            "    def _pack(self, t):\n"
            "        if self.nothing_alive():\n"
            "            self._release()  # HKL321\n"
            "        return t\n"
            "    def _unpack(self, t):\n"
            "        return t\n"
            "    def nothing_alive(self):\n"
            "        return True\n"
        ),
        Invalid(
            "import torch\n"
            "from torch._C import _autograd\n"
            "def _unpack(t):\n"
            "    torch._C._autograd._pop_saved_tensors_default_hooks()  # HKL321\n"
            "    return t\n"
            "def install():\n"
            "    torch._C._autograd._push_saved_tensors_default_hooks(lambda t: t, _unpack)\n"
        ),
        Invalid(
            "from torch.autograd.graph import saved_tensors_hooks\n"
            "class Offloader(saved_tensors_hooks):\n"
            "    def __init__(self, budget):\n"
            "        super().__init__(self._pack, self._unpack)\n"
            "        self.budget = budget\n"
            "    def _pack(self, t):\n"
            "        self.budget -= t.numel()\n"
            "        if self.budget <= 0:\n"
            "            self.__exit__()  # HKL321\n"
            "        return t.cpu()\n"
            "    def _unpack(self, t):\n"
            "        return t\n"
        ),
        Invalid(
            "import torch\n"
            "class Offload:\n"
            "    def __init__(self):\n"
            "        self.ctx = torch.autograd.graph.save_on_cpu()\n"
            "    def forward_region(self, fn, x):\n"
            "        self.ctx.__enter__()\n"
            "        out = fn(x)\n"
            "        out.register_hook(self._on_backward_start)\n"
            "        return out\n"
            "    def _on_backward_start(self, grad):\n"
            "        self.ctx.__exit__(None, None, None)  # HKL321\n"
        ),
        Invalid(
            "import torch.autograd.graph as g\n"
            "scope = g.saved_tensors_hooks(lambda t: t, lambda t: (scope.__exit__(None, None, None), t)[1])  # HKL321\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        if not any(word in ctx.text for word in TRIGGERS):
            return  # parsed for another rule: no saved-tensors context to pop here
        scopes = SavedTensorScopes(ctx.model, ctx.core)
        sites = list(scopes.hook_sites()) + list(scopes.backward_sites())
        reported: set[int] = set()
        for site in sites:
            path = scopes.pop_path(site.function)
            if path is None or id(path.first) in reported:
                continue
            reported.add(id(path.first))
            yield self._finding(ctx, site, path)

    def _finding(self, ctx: FileContext, site: HookSite, path: PopPath) -> Finding:
        hook = _name(site.function)
        pop = path.pop
        popped = ("`torch._C._autograd._pop_saved_tensors_default_hooks()`"
                  if not (isinstance(pop.func, ast.Attribute) and pop.func.attr == "__exit__")
                  else f"`{_src(pop.func.value)}.__exit__(...)`")
        via = ""
        if len(path.calls) > 1:
            via = " through " + " -> ".join(f"`{_src(c.func)}()`" for c in path.calls[:-1])
        if site.during_backward:
            why = (f"{'an unpack hook' if site.role == 'unpack' else 'it'} runs during backward(), under a copy of the hooks stack that autograd puts back "
                   "when the backward ends: the hooks stay installed on the thread that entered them (every later "
                   "forward is still packed by them) although the code believes they are gone, and another pop in "
                   "the same backward removes other hooks or fails with torch's '!tls.stack.empty() INTERNAL "
                   "ASSERT FAILED'")
        else:
            why = ("a pack hook runs in the middle of an operation that is saving its tensors: the pop takes effect "
                   "at once, so the rest of that operation's saved tensors skip the hooks (kept as they are, not "
                   "offloaded or recomputed)")
        what = site.role if site.role.endswith(("hook", "backward")) else f"{site.role} hook"
        message = (f"the {what} `{hook}` exits a saved-tensors-hooks context{via} ({popped}, line "
                   f"{pop.lineno}): {why}; older torch releases could crash here (pytorch#130734)")
        related = [Related(f"`{hook}` is handed to autograd as a {what} here", ctx.display_path,
                           ctx.span(site.registered_at)[0])]
        if pop is not path.first:
            related.append(Related("the context is exited here", ctx.display_path, ctx.span(pop)[0]))
        return self.finding(
            ctx, path.first, message=message,
            help="Decide in the hook, exit outside it: record that the context can go (a flag) and call "
                 "`__exit__` from the code that entered it, after the forward or the backward, or use a `with` "
                 "block around the region.",
            related=related,
        )


def _name(function: ast.AST) -> str:
    return getattr(function, "name", None) or "<lambda>"


def _src(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."
