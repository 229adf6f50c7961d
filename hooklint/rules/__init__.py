"""The rule registry.  Codes are fixed forever; a retired code is never reused."""

from __future__ import annotations

import re
from functools import lru_cache

from hooklint.rules.base import Invalid, Rule

__all__ = ["Invalid", "Rule", "RuleEntry", "all_rules", "rule_entries", "rule_class", "get_rule", "expand_selectors",
           "UnknownRuleError"]

_RULE_MODULES = (
    "hooklint.rules.syntax_error",
    "hooklint.rules.io_error",
    "hooklint.rules.legacy_backward_hook",
    "hooklint.rules.legacy_hook_grad_input",
    "hooklint.rules.grad_edit_in_module_hook",
    "hooklint.rules.grad_none_guard",
    "hooklint.rules.post_accumulate_hook_argument",
    "hooklint.rules.grad_edit_in_tensor_hook",
    "hooklint.rules.optimizer_step_in_hook_under_accumulation",
    "hooklint.rules.backward_hook_updates_step_state",
    "hooklint.rules.replica_rebinds_hook_store",
    "hooklint.rules.hook_captured_container_rebound",
    "hooklint.rules.tensor_hook_removed_before_backward",
    "hooklint.rules.module_hook_registered_after_forward",
    "hooklint.rules.forward_bypasses_hooks",
    "hooklint.rules.hook_leak",
    "hooklint.rules.node_hook_reference_cycle",
    "hooklint.rules.hook_leak_on_exception",
    "hooklint.rules.hook_left_on_caller_model",
    "hooklint.rules.shared_hook_handles",
    "hooklint.rules.hook_removed_while_needed",
    "hooklint.rules.hook_mutates_argument",
    "hooklint.rules.hook_return_arity",
    "hooklint.rules.full_hook_inplace",
    "hooklint.rules.hook_on_shared_input",
    "hooklint.rules.full_hook_on_caller_module",
    "hooklint.rules.function_grad_count",
    "hooklint.rules.function_grad_order",
    "hooklint.rules.param_never_receives_grad",
    "hooklint.rules.grads_diverge_across_ranks",
    "hooklint.rules.grad_edit_races_allreduce",
    "hooklint.rules.param_hook_under_fsdp",
    "hooklint.rules.unused_noqa",
    "hooklint.rules.handle_container_type",
    "hooklint.rules.handle_attribute_unset",
    "hooklint.rules.function_returns_view",
    "hooklint.rules.function_backward_writes_grad",
    "hooklint.rules.hook_on_frozen_param",
    "hooklint.rules.hook_assumes_tensor_output",
    "hooklint.rules.backward_hook_on_embedding",
    "hooklint.rules.backward_only_for_hooks",
    "hooklint.rules.forward_hook_replaces_output",
    "hooklint.rules.hook_after_compile",
    "hooklint.rules.hook_removed_before_recompute",
    "hooklint.rules.stateful_hook_under_checkpoint",
    "hooklint.rules.untraceable_hook_under_fullgraph",
    "hooklint.rules.saved_tensor_layout_lost",
    "hooklint.rules.saved_tensors_hooks_exited_in_hook",
    "hooklint.rules.hook_per_parent_on_shared_module",
    "hooklint.rules.hook_transfer_duplicates",
    "hooklint.rules.handle_list_never_emptied",
    "hooklint.rules.pre_hook_needs_positional_input",
    "hooklint.rules.load_hook_replaces_tensor",
    "hooklint.rules.lazy_tensor_without_load_hook",
    "hooklint.rules.hook_counts_module_per_call",
    "hooklint.rules.grad_hook_collective_skips_unused",
    "hooklint.rules.helper_bypasses_own_hooks",
    "hooklint.rules.instance_forward_closure",
    "hooklint.rules.hook_on_replaced_parameter",
    "hooklint.rules.forward_reenters_module_call",
    "hooklint.rules.module_hook_on_replaced_module",
    "hooklint.rules.hook_dicts_not_copied",
    "hooklint.rules.forward_rewrapped_per_object",
    "hooklint.rules.foreign_hooks_assumed_own",
    "hooklint.rules.foreign_hook_removed_whatever_kind",
    "hooklint.rules.instance_state_picks_forward_wrapper",
    "hooklint.rules.found_handle_removed",
    "hooklint.rules.hook_protocol_template_inlined",
    "hooklint.rules.handles_on_caller_object",
    "hooklint.rules.hook_replayed_without_kwargs",
    "hooklint.rules.hook_override_drops_return",
    "hooklint.rules.hook_reads_positional_only",
    "hooklint.rules.function_backward_ignores_grad_output",
    "hooklint.rules.function_grad_is_tuple",
    "hooklint.rules.function_saved_subset_misindexed",
    "hooklint.rules.function_grad_output_read_as_scalar",
    "hooklint.rules.function_none_guard_mismatch",
    "hooklint.rules.function_apply_on_container",
    "hooklint.rules.state_dict_step_skips_hooks",
    "hooklint.rules.capture_wrapper_replaces_module",
    "hooklint.rules.negative_index_never_hooked",
    "hooklint.rules.hook_state_keys_miss_hooked",
    "hooklint.rules.function_ctx_attribute_unset",
    "hooklint.rules.handle_overwritten_in_loop",
    "hooklint.rules.post_accumulate_hook_after_grad_cleared",
    "hooklint.rules.hook_tuple_argument_misread",
    "hooklint.rules.hook_signature_mismatch",
    "hooklint.rules.state_dict_hook_number_as_tensor",
    "hooklint.rules.pre_hook_returns_unwrapped_input",
    "hooklint.rules.capture_assumes_kwarg_tensor",
    "hooklint.rules.hook_outputs_paired_by_position",
    "hooklint.rules.capture_first_value_then_append",
    "hooklint.rules.function_saved_tensors_read_twice",
    "hooklint.rules.saved_tensor_dtype_not_restored",
    "hooklint.rules.recompute_without_rng_state",
    "hooklint.rules.state_dict_hook_ignores_prefix",
    "hooklint.rules.backward_calls_undefined_name",
    "hooklint.rules.hook_reads_tuple_output_as_tensor",
    "hooklint.rules.hook_squeezes_batch_axis",
    "hooklint.rules.hook_accumulates_autograd_graph",
    "hooklint.rules.forward_needs_grad_mode",
    "hooklint.rules.tensor_hook_reads_per_call_state",
    "hooklint.rules.hook_uses_placeholder_it_replaces",
    # r7b1
    "hooklint.rules.function_ctx_stores_output",
    "hooklint.rules.hook_reads_none_attention_slot",
    "hooklint.rules.grad_wrt_frozen_params",
)


class UnknownRuleError(ValueError):
    pass


class RuleEntry:
    """A rule as the driver sees it before importing it (``hooklint/rules/catalog.py``):
    enough to select rules, prefilter files and judge ``# noqa`` codes.  A
    rule's module (and the analysis it imports) is loaded when a file passes
    the prefilter for the rules (:func:`rule_class`)."""

    __slots__ = ("code", "name", "module", "class_name", "default_enabled", "origins", "triggers",
                 "trigger_pattern", "static")

    def __init__(self, code: str, name: str, module: str, class_name: str, default_enabled: bool,
                 origins: tuple[str, ...], triggers: tuple[str, ...], trigger_pattern: str | None, static: bool):
        self.code, self.name, self.module, self.class_name = code, name, module, class_name
        self.default_enabled, self.origins, self.static = default_enabled, origins, static
        self.triggers, self.trigger_pattern = triggers, trigger_pattern

    def as_row(self) -> tuple:
        return (self.code, self.name, self.module, self.class_name, self.default_enabled, self.origins,
                self.triggers, self.trigger_pattern, self.static)


@lru_cache(maxsize=None)
def rule_entries() -> tuple[RuleEntry, ...]:
    """Every rule, by code, from the generated catalog (no rule module imported)."""
    from hooklint.rules.catalog import RULES

    return tuple(RuleEntry(*row) for row in RULES)


@lru_cache(maxsize=None)
def _entries_by_code() -> dict[str, RuleEntry]:
    return {entry.code: entry for entry in rule_entries()}


def rule_class(code: str) -> type[Rule]:
    """The class of rule ``code``, importing its module only."""
    import importlib

    entry = _entries_by_code()[code]
    return getattr(importlib.import_module(entry.module), entry.class_name)


def catalog_rows() -> list[tuple]:
    """The catalog as the rule classes say it should be (``python -m hooklint.docs`` writes it)."""
    rows = []
    for rule in all_rules():
        rows.append((rule.code, rule.name, rule.__module__, rule.__qualname__, rule.default_enabled,
                     tuple(o.value for o in rule.origins), tuple(rule.triggers), rule.trigger_pattern,
                     rule.check is not Rule.check))
    return rows


@lru_cache(maxsize=None)
def all_rules() -> tuple[type[Rule], ...]:
    import importlib

    found: dict[str, type[Rule]] = {}
    for modname in _RULE_MODULES:
        try:
            module = importlib.import_module(modname)
        except ModuleNotFoundError as exc:  # a family not written yet
            if exc.name != modname:
                raise
            continue
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Rule) and obj is not Rule and "code" in vars(obj):
                if obj.code in found and found[obj.code] is not obj:
                    raise RuntimeError(f"duplicate rule code {obj.code}")
                found[obj.code] = obj
    return tuple(found[c] for c in sorted(found))


def get_rule(code_or_name: str) -> type[Rule]:
    key = code_or_name.strip()
    for entry in rule_entries():
        if entry.code == key.upper() or entry.name == key.lower():
            return rule_class(entry.code)
    raise UnknownRuleError(f"unknown rule {code_or_name!r} (see `hooklint rule --all`)")


_SELECTOR_RE = re.compile(r"^(ALL|HKL\d{0,3})$")


def expand_selectors(selectors: list[str] | tuple[str, ...]) -> set[str]:
    """Turn ruff-style selectors (``HKL``, ``HKL1``, ``HKL10``, ``HKL101``, ``ALL``,
    or a rule name) into the set of codes they name."""
    codes: set[str] = set()
    for raw in selectors:
        sel = raw.strip()
        if not sel:
            continue
        upper = sel.upper()
        if _SELECTOR_RE.match(upper):
            prefix = "HKL" if upper == "ALL" else upper
            matched = {r.code for r in rule_entries() if r.code.startswith(prefix)}
            if not matched:
                raise UnknownRuleError(f"selector {sel!r} matches no rule (see `hooklint rule --all`)")
            codes |= matched
        else:
            codes.add(get_rule(sel).code)
    return codes


def default_codes() -> set[str]:
    return {r.code for r in rule_entries() if r.default_enabled}
