"""HKL334: a module's own state is read off its instance `__dict__` minus fixed names that leave a forward wrapper's attributes in."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.foreign_hooks import instance_state_reads


class InstanceStatePicksForwardWrapper(Rule):
    """
    ## What it does
    Reports `self.__dict__` (or `vars(self)`) in a method of an `nn.Module`
    class when its keys are narrowed by a fixed set of names the code
    spells (`self.__dict__.keys() - SKIP`, `{k: v for k, v in
    self.__dict__.items() if k not in SKIP}`, the set a literal, a class
    attribute or a module constant) and that set does not name `forward`:
    the code takes every other instance attribute for the module's own
    state.

    ## Why is this bad?
    Code that wraps a module's forward does it on the instance: a plain
    `module.forward = wrapper` (tracers, interpretability libraries,
    patchers) puts a `forward` entry in the instance `__dict__`, and
    accelerate's `add_hook_to_module` (models loaded with
    `device_map="auto"`, `cpu_offload`, `dispatch_model`) adds `_hf_hook`,
    `_old_forward` and a `forward` partial too.  A skip list written for the
    attributes the module itself and the frameworks its authors knew add
    misses them: the wrapper's function, the hook object and the bound
    original forward are saved as if they were the module's properties.
    Saving fails (a local function or a bound method does not pickle), or a
    restored module gets a stale forward (nvidia-modelopt 0.41: saving a
    restored quantized model loaded with `device_map="auto"` failed).

    ## Known problems
    Only narrowing by names this file spells is recognised; a skip list
    built elsewhere (a base class of another file) is not followed, and an
    unnarrowed `__dict__` copy (`__getstate__`) is not reported.  The
    severity is *warning*: the module is affected only when something wraps
    its forward on the instance.

    ## Example
    ```python
    import torch.nn as nn

    class Quantizer(nn.Module):
        _skip = {"_calibrator", "_padding"}

        def properties(self):
            return {k: self.__dict__[k] for k in self.__dict__.keys() - nn.Module().__dict__.keys() - self._skip}
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class Quantizer(nn.Module):
        # what forward wrappers add to the instance: any `module.forward = ...`, accelerate's hook
        _skip = {"_calibrator", "_padding", "forward", "_hf_hook", "_old_forward"}

        def properties(self):
            return {k: self.__dict__[k] for k in self.__dict__.keys() - nn.Module().__dict__.keys() - self._skip}
    ```

    ## Fix safety
    There is no automatic fix: leave out `forward`, `_hf_hook` and
    `_old_forward`, or list the properties the module owns instead of
    subtracting the ones it does not.

    ## References
    - [accelerate `add_hook_to_module`](https://huggingface.co/docs/accelerate/package_reference/big_modeling#accelerate.hooks.add_hook_to_module):
      the hook is stored on the module and its forward replaced
    - NVIDIA Model-Optimizer pull request 906 (accelerate's hook attributes added to the skip list)
    """

    code = "HKL334"
    name = "instance-state-picks-forward-wrapper"
    summary = "A module's own state is read off its instance __dict__ minus names that miss a forward wrapper's"
    severity = Severity.WARNING
    triggers = ("self.__dict__", "vars(self)")
    # the instance dict read and filtered in one expression: `... .keys() - SKIP` (perhaps across a line
    # break) or a comprehension's `if k not in ...`
    trigger_pattern = (r"(?:self\.__dict__|vars\(self\))[\w.()]*[ \t]*(?:#[^\n]*)?(?:\\?\n[ \t]*)?-"
                       r"|(?:self\.__dict__|vars\(self\))[^\n]{0,80}\bnot[ \t]+in\b")
    VALID: ClassVar[tuple[str, ...]] = (
        # the skip list leaves out the instance forward and accelerate's attributes
        "import torch.nn as nn\n"
        "class Quantizer(nn.Module):\n"
        "    _skip = {'_calibrator', 'forward', '_hf_hook', '_old_forward'}\n"
        "    def properties(self):\n"
        "        return self.__dict__.keys() - nn.Module().__dict__.keys() - self._skip\n",
        # a plain object, not a module: nothing wraps its forward
        "class Config:\n"
        "    _skip = {'cache'}\n"
        "    def state(self):\n"
        "        return {k: v for k, v in vars(self).items() if k not in self._skip}\n",
        # a pickling copy of the whole dict: not a selection of own properties
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __getstate__(self):\n"
        "        return self.__dict__.copy()\n",
        # the names come from elsewhere: not read
        "import torch.nn as nn\n"
        "from .config import SKIP\n"
        "class Net(nn.Module):\n"
        "    def state(self):\n"
        "        return self.__dict__.keys() - SKIP\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "class Quantizer(nn.Module):\n"
            "    _skip = {'_calibrator', '_padding'}\n"
            "    def properties(self):\n"
            "        return (self.__dict__.keys()  # HKL334\n"
            "                - nn.Module().__dict__.keys() - self._skip)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "IGNORED = ('training', '_modules', '_parameters', '_buffers')\n"
            "class Probe(nn.Module):\n"
            "    def extra_state(self):\n"
            "        return {name: value for name, value in vars(self).items() if name not in IGNORED}  # HKL334\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in instance_state_reads(ctx):
            missing = ", ".join(f"`{name}`" for name in found.missing)
            yield self.finding(
                ctx, found.read,
                message=(f"every instance attribute except {len(found.excluded)} fixed names is taken as this "
                         f"module's own state, and the names leave out {missing}: a forward wrapper put on the "
                         f"instance (`module.forward = wrapper`, accelerate's `add_hook_to_module` for "
                         f"`device_map=\"auto\"` or offloading) adds those attributes, which are then collected as "
                         f"the module's properties (a wrapper function or hook object in saved state fails to "
                         f"pickle or restores a stale forward)"),
                help=f"Leave {missing} out as well, or list the properties the module owns instead.",
                related=[Related("the names left out", ctx.display_path, ctx.span(found.where)[0])],
            )
