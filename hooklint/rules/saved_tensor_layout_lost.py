"""HKL801: saved-tensor hooks that keep a tensor's storage but not its view layout (docs/saved-tensors.md)."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.saved_tensors import (
    TRIGGERS,
    LayoutFacts,
    layout_records,
    restrides,
    storage_handles,
    storage_keyed_caches,
    uses_saved_tensor_hooks,
)

HELP_KEY = ("Key the cache by the whole view: add `tensor.shape` and `tensor.stride()` (and the device) to the key, "
            "as in `(t.device, t.data_ptr(), t.dtype, t.shape, t.stride())`; or keep one copy per saved tensor.")
HELP_RESTRIDE = ("Record the layout of the copy, not of the original (`copy.stride()`, offset 0), or make the "
                 "tensor compact before recording it (`t = t.clone(memory_format=torch.contiguous_format)` when "
                 "`not t.is_contiguous() or t.storage_offset() != 0`); only a copy of the whole storage keeps the "
                 "original's strides and offset meaningful.")


class SavedTensorLayoutLost(Rule):
    """
    ## What it does
    Reports saved-tensor hooks (`torch.autograd.graph.saved_tensors_hooks`,
    a subclass of it, or torch's default-hooks stack) whose pack side keeps
    a saved tensor's *storage* but not its *view layout*, so that the unpack
    side cannot give backward the tensor it saved:

    - a cache keyed by the storage address (`data_ptr()`,
      `untyped_storage().data_ptr()`, with or without `storage_offset()`
      and the dtype) but not by the shape and strides, where one copy is
      filed per key and the key itself is kept as the saved tensor's handle
      (returned by the pack hook, or stored in a state table), also when
      the key is spelled out where it is used (`cache[t.data_ptr()] = ...`,
      `return t.data_ptr()`);
    - a pack hook that returns the tensor's storage (`t.untyped_storage()`
      or a copy of it) without its strides and storage offset;
    - the original's `stride()` / `storage_offset()` kept with an
      element-wise copy of it (`torch.empty_like(t)` + `copy_`, `t.cpu()`,
      `t.to(...)`, `t.clone()`) in one tuple, list or dict, in a file
      whose unpack side rebuilds
      tensors with `as_strided(..., stride, storage_offset)` or
      `set_(storage, storage_offset, size, stride)`.

    Functions of the file are followed (a key made by a helper such as
    `_get_unique_tensor_key(t)`), also when the cache is filled outside the
    pack hook itself (a handler's bulk offload).

    ## Why is this bad?
    Autograd saves views as they are: `x * x.t()` saves `x` and `x.t()`,
    which share one storage and one start address but not their strides;
    `x[:2]` and `x[:3]` share their start but not their shape.  A cache keyed
    by address gives all of them the copy of whichever was saved first, and
    the unpack side hands that copy back (or `.view(shape)`s it): a square
    transpose silently feeds backward the untransposed values (wrong
    gradients, no error), a shorter slice fails to reshape.

    A copy made element by element has its own layout: the copy of a slice
    (`x[:, 1:3]`) is compact and starts at offset 0.  Applying the
    original's strides and offset to it with `as_strided` reads outside it
    (`RuntimeError: setStorage: sizes [4, 2], strides [4, 1], storage offset
    1 ... out of bounds for storage of size 32`); `set_` instead grows the
    copy's storage and backward reads memory nobody wrote (wrong gradients,
    no error).

    Saving whole tensors is fine: a pack hook that returns `t.cpu()` (or
    `(t.device, t.to("cpu"))`) and an unpack that returns `.to(device)`
    gives backward a tensor with the same values, and backward reads saved
    tensors by value.

    ## Known problems
    The layout check is per function: a pack side that tests
    `t.is_contiguous()` or replaces `t` by `t.contiguous()` / `t.clone()`
    before recording its layout is taken as the fix, although
    `.contiguous()` keeps a contiguous view's storage offset.  A key that
    is the tensor's `id()` or a counter is not a storage key and is not
    reported.

    ## Example
    ```python
    import torch
    from torch.autograd.graph import saved_tensors_hooks

    class OffloadOnce(saved_tensors_hooks):
        def __init__(self):
            self.copies = {}
            super().__init__(self.pack, self.unpack)

        def pack(self, tensor):
            key = (tensor.data_ptr(), tensor.dtype)
            if key not in self.copies:
                self.copies[key] = tensor.detach().to("cpu", copy=True)
            return key, tensor.shape

        def unpack(self, packed):
            key, shape = packed
            return self.copies[key].view(shape)
    ```

    ## Use instead
    ```python
    import torch
    from torch.autograd.graph import saved_tensors_hooks

    class OffloadOnce(saved_tensors_hooks):
        def __init__(self):
            self.copies = {}
            super().__init__(self.pack, self.unpack)

        def pack(self, tensor):
            key = (tensor.device, tensor.data_ptr(), tensor.dtype, tensor.shape, tensor.stride())
            if key not in self.copies:
                self.copies[key] = tensor.detach().to("cpu", copy=True)
            return key, tensor.device

        def unpack(self, packed):
            key, device = packed
            return self.copies[key].to(device)
    ```

    ## Fix safety
    There is no automatic fix: the key or the recorded layout must describe
    the view that is handed back.

    ## References
    - [Hooks for saved tensors](https://pytorch.org/docs/stable/notes/autograd.html#hooks-for-saved-tensors)
    - ms-swift PR 10157 (activation offload keyed by storage address; 4.6.0 adds shape and strides)
    - trl PR 5694 (`OffloadActivations` restored a slice's strides on its compact copy; 1.4.0)
    """

    code = "HKL801"
    name = "saved-tensor-layout-lost"
    summary = "Saved-tensor hooks keep a tensor's storage but not its view layout: backward gets another tensor"
    severity = Severity.ERROR
    triggers = TRIGGERS
    trigger_pattern = r"data_ptr|storage|as_strided|\.set_\("
    VALID: ClassVar[tuple[str, ...]] = (
        # whole tensors to the host and back (the documentation's example)
        "import torch\n"
        "def pack(t):\n"
        "    return t.device, t.cpu()\n"
        "def unpack(packed):\n"
        "    device, t = packed\n"
        "    return t.to(device)\n"
        "def run(model, x):\n"
        "    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):\n"
        "        return model(x)\n",
        # a key with the shape and the strides
        "import torch\n"
        "copies = {}\n"
        "def pack(t):\n"
        "    key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride(), t.dtype)\n"
        "    copies.setdefault(key, t.detach().cpu())\n"
        "    return key\n"
        "def unpack(key):\n"
        "    return copies[key]\n"
        "hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)\n",
        # storage-keyed dedupe whose hit path keeps the tensor itself
        "import torch\n"
        "class Offload(torch.autograd.graph.saved_tensors_hooks):\n"
        "    def __init__(self):\n"
        "        self.seen = {}\n"
        "        self.saved = {}\n"
        "        super().__init__(self.pack, self.unpack)\n"
        "    def pack(self, t):\n"
        "        tid = len(self.saved)\n"
        "        storage = t.untyped_storage().data_ptr()\n"
        "        if storage in self.seen:\n"
        "            self.saved[tid] = t\n"
        "        else:\n"
        "            self.seen[storage] = tid\n"
        "            self.saved[tid] = t.cpu()\n"
        "        return tid\n"
        "    def unpack(self, tid):\n"
        "        return self.saved.pop(tid).to('cuda')\n",
        # the layout recorded after making the tensor compact
        "import torch\n"
        "def pack(t):\n"
        "    if not t.is_contiguous() or t.storage_offset() != 0:\n"
        "        t = t.clone(memory_format=torch.contiguous_format)\n"
        "    stride, offset = t.stride(), t.storage_offset()\n"
        "    host = torch.empty_like(t, device='cpu')\n"
        "    host.copy_(t)\n"
        "    return host, t.shape, stride, offset\n"
        "def unpack(packed):\n"
        "    host, shape, stride, offset = packed\n"
        "    return torch.as_strided(host.to('cuda'), shape, stride, offset)\n"
        "hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)\n",
        # a copy of the whole storage: the original's strides and offset still describe it
        "import torch\n"
        "def pack(t):\n"
        "    n = t.untyped_storage().nbytes() // t.element_size()\n"
        "    raw = torch.as_strided(t, (n,), (1,), 0).cpu()\n"
        "    layout = (t.shape, t.stride(), t.storage_offset())\n"
        "    return raw, layout\n"
        "def unpack(packed):\n"
        "    raw, (shape, stride, offset) = packed\n"
        "    return raw.to('cuda').as_strided(shape, stride, offset)\n"
        "hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)\n",
        # the tensor object's id in the key (torch's allow_mutation_on_saved_tensors): one entry per view
        "import torch\n"
        "class Swap(torch.autograd.graph.saved_tensors_hooks):\n"
        "    def __init__(self, ctx):\n"
        "        def pack(tensor):\n"
        "            tid = (id(tensor), tensor.data_ptr(), tensor._version)\n"
        "            ctx.aliases[tensor.data_ptr()].add(tid)\n"
        "            if tid not in ctx.handles:\n"
        "                handle = object()\n"
        "                ctx.handles[tid] = handle\n"
        "                ctx.original[handle] = tensor\n"
        "            else:\n"
        "                handle = ctx.handles[tid]\n"
        "            return handle\n"
        "        def unpack(handle):\n"
        "            return ctx.original[handle]\n"
        "        super().__init__(pack, unpack)\n",
        # the storage with its full layout
        "import torch\n"
        "def pack(t):\n"
        "    return t.untyped_storage(), t.storage_offset(), t.shape, t.stride(), t.dtype\n"
        "def unpack(p):\n"
        "    storage, offset, shape, stride, dtype = p\n"
        "    return torch.empty(0, dtype=dtype).set_(storage, offset, shape, stride)\n"
        "hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)\n",
        # no saved-tensor hooks in the file: a parameter cache keyed by address
        "import torch\n"
        "cache = {}\n"
        "def remember(p):\n"
        "    key = p.data_ptr()\n"
        "    cache[key] = p.detach().cpu()\n"
        "    return key\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class StorageOffload(torch.autograd.graph.saved_tensors_hooks):\n"
            "    def __init__(self):\n"
            "        super().__init__(self.pack, self.unpack)\n"
            "    def pack(self, t):\n"
            "        host = t.untyped_storage().cpu()\n"
            "        return host, t.shape, t.dtype, t.device  # HKL801\n"
            "    def unpack(self, packed):\n"
            "        host, shape, dtype, device = packed\n"
            "        flat = torch.empty(0, dtype=dtype).set_(host)\n"
            "        return flat[:shape.numel()].view(shape).to(device)\n"
        ),
        Invalid(
            "import torch\n"
            "def storage_id(t):\n"
            "    return t.untyped_storage().data_ptr() + t.storage_offset()\n"
            "host_copies = {}\n"
            "def pack(t):\n"
            "    sid = storage_id(t)  # HKL801\n"
            "    host_copies.setdefault(sid, t.detach().cpu())\n"
            "    return sid\n"
            "def unpack(sid):\n"
            "    return host_copies[sid].to('cuda')\n"
            "def train_step(model, x):\n"
            "    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):\n"
            "        model(x).sum().backward()\n"
        ),
        Invalid(
            "import torch\n"
            "def _key(tensor):\n"
            "    return (tensor.data_ptr(), tensor.dtype, tensor.shape)\n"
            "class Handler:\n"
            "    def __init__(self):\n"
            "        self.state, self.groups = {}, {}\n"
            "    def offload(self, group, tags):\n"
            "        mapping = {}\n"
            "        for tag in tags:\n"
            "            t = self.state[tag]\n"
            "            k = _key(t)  # HKL801\n"
            "            if k not in mapping:\n"
            "                mapping[k] = t.to('cpu', non_blocking=True)\n"
            "            self.state[tag] = (k, t.shape)\n"
            "        self.groups[group] = mapping\n"
            "class Hook:\n"
            "    def __enter__(self):\n"
            "        torch._C._autograd._push_saved_tensors_default_hooks(self.pack, self.unpack)\n"
        ),
        Invalid(
            "import torch\n"
            "class Offload(torch.autograd.graph.saved_tensors_hooks):\n"
            "    def __init__(self):\n"
            "        self.saved = {}\n"
            "        super().__init__(self.pack, self.unpack)\n"
            "    def pack(self, activation):\n"
            "        tid = len(self.saved)\n"
            "        stride = activation.stride()  # HKL801\n"
            "        offset = activation.storage_offset()\n"
            "        host = torch.empty_like(activation, device='cpu')\n"
            "        host.copy_(activation)\n"
            "        self.saved[tid] = [host, activation.size(), stride, offset]\n"
            "        return tid\n"
            "    def unpack(self, tid):\n"
            "        host, size, stride, offset = self.saved.pop(tid)\n"
            "        return torch.as_strided(host.to('cuda'), size=size, stride=stride, storage_offset=offset)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        if not uses_saved_tensor_hooks(ctx.tree):
            return
        ctx.model  # noqa: B018  (builds the tree's parent links, which the pack-hook facts read)
        facts = LayoutFacts(ctx.tree)
        for cache in storage_keyed_caches(ctx.tree, facts):
            missing = " and ".join(cache.missing)
            yield self.finding(
                ctx, cache.key,
                message=(f"`{cache.name}` names a saved tensor by its storage address but not by its {missing}, "
                         f"and `{cache.func.name}` files one copy per `{cache.name}` in `{cache.cache}` and keeps "
                         f"`{cache.name}` as the tensor's handle: views of one storage that start at the same "
                         f"address (a tensor and its transpose, two slices) get the copy of whichever was saved "
                         f"first, so backward reads the wrong values (a square transpose: wrong gradients, no "
                         f"error) or fails to reshape"),
                help=HELP_KEY,
                related=[Related(f"a copy filed under `{cache.name}`", ctx.display_path, ctx.span(cache.filed)[0]),
                         Related(f"`{cache.name}` kept as the saved tensor's handle", ctx.display_path,
                                 ctx.span(cache.kept)[0])],
            )
        for handle in storage_handles(ctx.tree, facts):
            name = getattr(handle.pack, "name", "the pack hook")
            yield self.finding(
                ctx, handle.returned,
                message=(f"pack hook `{name}` returns the saved tensor's storage without its "
                         f"{' and '.join(handle.missing)}: the unpack side can only rebuild a tensor laid out from "
                         f"the start of that storage, so a saved view (a transpose, a slice, a view with an offset) "
                         f"comes back as another tensor and backward computes wrong gradients or fails"),
                help="Return the layout with the storage (`t.shape`, `t.stride()`, `t.storage_offset()`) and rebuild "
                     "with `torch.empty(0, dtype=...).set_(storage, offset, shape, stride)`, or save a copy of the "
                     "tensor itself (`t.cpu()`).",
            )
        calls = restrides(ctx.tree)
        if not calls:
            return
        for record in layout_records(ctx.tree, facts):
            what = " and ".join(f"`{record.tensor}.{w}()`" for w in record.what)
            copy = ctx.segment(record.copy)
            yield self.finding(
                ctx, record.record,
                message=(f"`{record.func.name}` keeps {what} of the saved tensor with `{copy}`, an element-wise "
                         f"copy of it, and this file rebuilds saved tensors with `as_strided` / `set_` from recorded "
                         f"strides and offsets: the copy of a slice or of a view with a storage offset is compact "
                         f"and starts at offset 0, so the original's layout does not describe it and backward "
                         f"fails (`as_strided`: `setStorage: ... out of bounds`) or reads memory outside the copy (`set_`)"),
                help=HELP_RESTRIDE,
                related=[Related("the copy", ctx.display_path, ctx.span(record.copy)[0])]
                + [Related("rebuilt here", ctx.display_path, ctx.span(r.call)[0]) for r in calls[:2]],
            )
