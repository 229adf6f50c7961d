"""HKL311: a backward hook on a caller's embedding layer, whose output needs no grad when the embedding is frozen (hook-lifetime.md)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.flow import executed_nodes
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, HookKind, Registration
from hooklint.static.requires_grad import embedding_layer, makes_trainable

REGISTER_ERROR = "RuntimeError: cannot register a hook on a tensor that doesn't require gradient"


class BackwardHookOnEmbedding(Rule):
    """
    ## What it does
    Reports a module backward hook (`register_full_backward_hook`,
    `register_full_backward_pre_hook`, the legacy `register_backward_hook`)
    on the embedding layer of a model the file does not build (found with
    `get_input_embeddings()`, `find_embedding_layer(model)`, `model.embed_tokens`,
    or an `isinstance(m, nn.Embedding)` filter), and a forward hook on one
    that registers a tensor hook on its output, when nothing in the code
    switches gradients on (`requires_grad_()`, `requires_grad = True`).

    ## Why is this bad?
    An embedding's input is a tensor of integer ids, which never requires
    grad, so its output requires grad only when the embedding's weight
    does.  Fine-tuning with a frozen embedding (adapters, LoRA,
    `trainable: false`) is common, and then:

    - a module backward hook on it never runs: no error, the list of
      gradients the interpretation or attack code collects stays empty;
    - `output.register_hook(...)` in a forward hook raises
      `RuntimeError: cannot register a hook on a tensor that doesn't require gradient`.

    The library's own tests use a trainable embedding and pass.

    ## Known problems
    Whether the caller's embedding is frozen cannot be seen in the file:
    the severity is *warning*.  Not reported when the function or class
    switches gradients on somewhere (the usual fix: set `requires_grad`
    on the parameters for the duration of the call, or make the
    embedding's output require grad in a forward hook, as Hugging Face's
    `enable_input_require_grads` does).

    ## Example
    ```python
    def embedding_gradients(model, batch, find_embedding_layer):
        grads = []
        embedding = find_embedding_layer(model)
        handle = embedding.register_full_backward_hook(lambda m, gi, go: grads.append(go[0]))
        model(**batch)["loss"].backward()
        handle.remove()
        return grads
    ```

    ## Use instead
    ```python
    def embedding_gradients(model, batch, find_embedding_layer):
        grads = []
        embedding = find_embedding_layer(model)
        was_trainable = embedding.weight.requires_grad
        embedding.weight.requires_grad_(True)
        handle = embedding.register_full_backward_hook(lambda m, gi, go: grads.append(go[0]))
        try:
            model(**batch)["loss"].backward()
        finally:
            handle.remove()
            embedding.weight.requires_grad_(was_trainable)
        return grads
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - allennlp issue 3679 (`Predictor.get_gradients` returned nothing for models with a frozen embedding; fixed in 1.0.0)
    """

    code = "HKL311"
    name = "backward-hook-on-embedding"
    summary = "A backward hook on a caller's embedding layer never runs when the embedding is frozen"
    severity = Severity.WARNING
    triggers = ("register_full_backward_hook", "register_full_backward_pre_hook", "register_backward_hook",
                "register_hook") + DYNAMIC_NAME_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # gradients switched on for the call
        "def grads_of(model, batch):\n"
        "    for p in model.parameters():\n"
        "        p.requires_grad = True\n"
        "    out = []\n"
        "    model.get_input_embeddings().register_full_backward_hook(lambda m, gi, go: out.append(go[0]))\n"
        "    return out\n",
        # the file's own embedding
        "import torch.nn as nn\n"
        "emb = nn.Embedding(10, 4)\n"
        "emb.register_full_backward_hook(lambda m, gi, go: print(go[0]))\n",
        # a tensor hook guarded by requires_grad
        "def watch(model, store):\n"
        "    def fwd(module, inputs, output):\n"
        "        if output.requires_grad:\n"
        "            output.register_hook(store.append)\n"
        "    return model.get_input_embeddings().register_forward_hook(fwd)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def grads_of(model, store):\n"
            "    layer = model.get_input_embeddings()\n"
            "    return layer.register_full_backward_hook(lambda m, gi, go: store.append(go[0]))  # HKL311\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def watch(model, store):\n"
            "    def fwd(module, inputs, output):\n"
            "        output.register_hook(store.append)  # HKL311\n"
            "    for m in model.modules():\n"
            "        if isinstance(m, nn.Embedding):\n"
            "            m.register_forward_hook(fwd)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for reg in ctx.hooks.instances:
            if reg.receiver is None or reg.is_global or id(reg.call) in seen:
                continue
            if not (reg.kind.is_module_backward or reg.kind is HookKind.FORWARD):
                continue
            embedding = embedding_layer(ctx.model, ctx.inference, reg.receiver)
            if embedding is None or self._switches_grad_on(ctx, reg):
                continue
            if reg.kind.is_module_backward:
                seen.add(id(reg.call))
                yield self.finding(
                    ctx, reg.name_node, name_only=True,
                    message=(f"module backward hook on {embedding}: its input is integer ids, so its output "
                             f"requires grad only when its weight does; with a frozen embedding (adapters, LoRA, "
                             f"`trainable: false`) the hook never runs, silently"),
                    help="Switch gradients on for the embedding while the hook is needed (and restore them), or "
                         "make its output require grad in a forward hook (`output.requires_grad_(True)`).",
                )
                continue
            site = _output_tensor_hook(reg)
            if site is not None:
                seen.add(id(reg.call))
                yield self.finding(
                    ctx, site,
                    message=(f"tensor hook on the output of {embedding}, in forward hook `{reg.hook.name}`: its "
                             f"output requires grad only when the embedding's weight does; with a frozen embedding "
                             f"this raises \"{REGISTER_ERROR}\""),
                    help="Register only `if output.requires_grad:`, or make the output require grad first.",
                )

    @staticmethod
    def _switches_grad_on(ctx: FileContext, reg: Registration) -> bool:
        cls = ctx.model.enclosing_class(reg.call)
        scopes: list[ast.AST] = list(cls.methods.values()) if cls is not None else []
        func = ctx.model.enclosing_function(reg.call)
        if func is not None:
            scopes.append(func)
        if reg.hook is not None:
            scopes.append(reg.hook.node)
        return any(makes_trainable(scope) is not None for scope in scopes)


def _output_tensor_hook(reg: Registration) -> ast.AST | None:
    """``output.register_hook(...)`` in the forward hook's body, with no ``requires_grad`` test."""
    if reg.hook is None:
        return None
    output = reg.param("output")
    if output is None:
        return None
    body = list(executed_nodes(reg.hook.node))
    if any(isinstance(n, ast.Attribute) and n.attr == "requires_grad" and isinstance(n.ctx, ast.Load) for n in body):
        return None
    for node in body:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register_hook" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == output:
            return node.func
    return None
