"""Real torch: what HKL801 claims about saved-tensor hooks, run on the
fixture's own pack / unpack pairs (fixtures/rules/hkl801_saved_tensor_layout_lost.py).

- Autograd saves views as they are: `b * b.t()` saves `b` and `b.t()`, one
  storage, one start address, other strides.  A copy filed per storage
  address hands `b`'s copy back for `b.t()`: the gradient is silently wrong.
  Two slices that start at the same address (`b[:2]`, `b`) make the reshape
  of the shared copy fail.
- A storage handed back without the view's strides and offset rebuilds a
  tensor from the storage's start: a transpose and an offset slice get
  other values.
- An element-wise copy of a slice is compact and starts at offset 0;
  restoring the original's strides and offset on it with `as_strided` (or
  `set_`) fails out of bounds.
- The fixed spellings (a key with shape and strides, a dedupe that keeps the
  view itself, a compact copy recorded with its own layout, whole tensors
  to the host and back) give the gradients of a run without hooks, and
  hooklint says nothing about them.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl801_saved_tensor_layout_lost.py"


@pytest.fixture(scope="module")
def hooks():
    return runpy.run_path(str(FIXTURE))


def transpose_product(b):
    return (b * b.t() * torch.arange(1.0, 17.0).view(4, 4)).sum()   # mul saves b and b.t()


def overlapping_slices(b):
    return (b[:, 1:3] * b[:, :2]).sum() + (b[1:] ** 2).sum()     # views with storage offsets, non-dense


def prefix_slices(b):
    return (b[:2] ** 2).sum() + (b ** 2).sum()                   # pow saves b[:2] and b: one start, two shapes


def gradient(forward, context=None):
    x = torch.arange(16.0, requires_grad=True)
    b = x.view(4, 4) * 1.0  # a non-leaf whose views get saved
    if context is None:
        forward(b).backward()
    else:
        with context:
            out = forward(b)
        out.backward()
    return x.grad


def group_offload(hooks):
    return hooks["GroupOffload"](hooks["GroupHandler"]())


BUGGY = {
    "AddressDedupe": lambda h: h["AddressDedupe"](),
    "offload_by_storage": lambda h: h["offload_by_storage"](),
    "GroupOffload": group_offload,
    "StorageOffload": lambda h: h["StorageOffload"](),
    "InlineAddress": lambda h: h["InlineAddress"](),
}
FIXED = {
    "ViewKeyedDedupe": lambda h: h["ViewKeyedDedupe"](),
    "DedupeKeepsViews": lambda h: h["DedupeKeepsViews"](),
    "CompactThenRestore": lambda h: h["CompactThenRestore"](),
    "offload_whole_tensors": lambda h: h["offload_whole_tensors"](),
    "StorageWithLayout": lambda h: h["StorageWithLayout"](),
}


@pytest.mark.parametrize("name", sorted(BUGGY))
def test_storage_keyed_copy_gives_a_transpose_the_wrong_values(hooks, name):
    reference = gradient(transpose_product)
    wrong = gradient(transpose_product, BUGGY[name](hooks))
    assert not torch.equal(wrong, reference)   # no error, wrong gradient
    assert (wrong - reference).abs().max() > 1.0


def test_storage_keyed_copy_fails_for_a_shorter_slice(hooks):
    # `b[:2]` is saved first; `b` gets its 8-element copy, which cannot be viewed as 4x4.
    with pytest.raises(RuntimeError, match="shape '\\[4, 4\\]' is invalid for input of size 8"):
        gradient(prefix_slices, hooks["AddressDedupe"]())


def test_a_key_with_the_shape_but_not_the_strides_still_mixes_up_a_square_transpose(hooks):
    # GroupHandler's key has the shape: the shorter slice is told apart, the transpose is not.
    assert torch.equal(gradient(prefix_slices, group_offload(hooks)), gradient(prefix_slices))
    assert not torch.equal(gradient(transpose_product, group_offload(hooks)), gradient(transpose_product))


def test_original_layout_on_a_compact_copy_fails_with_as_strided(hooks):
    with pytest.raises(RuntimeError, match=r"setStorage: .* storage offset [1-9].* out of bounds for storage of size"):
        gradient(overlapping_slices, hooks["StrideRestore"]())


def test_original_layout_on_a_clone_fails_with_as_strided(hooks):
    with pytest.raises(RuntimeError, match=r"setStorage: .* storage offset [1-9].* out of bounds for storage of size"):
        gradient(overlapping_slices, hooks["offload_records"]())


def test_original_layout_on_a_compact_copy_reads_past_it_with_set_(hooks):
    # set_ grows the copy's storage instead of raising: backward reads memory nobody wrote.
    wrong = gradient(overlapping_slices, hooks["offload_with_layout"]())
    assert not torch.equal(wrong, gradient(overlapping_slices))


def test_storage_without_layout_gives_an_offset_slice_the_wrong_values(hooks):
    wrong = gradient(overlapping_slices, hooks["StorageOffload"]())
    assert not torch.equal(wrong, gradient(overlapping_slices))


def test_original_layout_on_a_copy_of_a_dense_view_still_works(hooks):
    # A transpose is dense: its copy keeps its strides, so only slices and offsets break.
    assert torch.equal(gradient(transpose_product, hooks["StrideRestore"]()), gradient(transpose_product))


@pytest.mark.parametrize("name", sorted(FIXED))
@pytest.mark.parametrize("forward", [transpose_product, overlapping_slices, prefix_slices])
def test_fixed_spellings_give_the_reference_gradient(hooks, name, forward):
    assert torch.equal(gradient(forward, FIXED[name](hooks)), gradient(forward))


def test_hooklint_reports_the_buggy_spellings_only():
    text = FIXTURE.read_text()
    findings = lint(text, "HKL801")
    lines = text.splitlines()
    reported = {lines[f.location.row - 1].strip() for f in findings}
    assert len(findings) == 8
    assert all(line.endswith("# HKL801") for line in reported)
    classes = [line for line in lines if line.startswith(("class ", "def "))]
    assert classes  # the fixture defines the pairs the tests above run
