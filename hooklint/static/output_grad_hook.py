"""The code HKL101's fix writes when a legacy backward hook cannot become a
full backward hook: a forward hook that hooks the module's output tensor.

``register_backward_hook(hook)`` gives ``hook`` the gradient of the module's
output as ``grad_output``.  ``register_full_backward_hook`` gives the same
``grad_output``, but it wraps the output in a view (``BackwardHookFunction``),
so an in-place op after the module (``nn.ReLU(inplace=True)``, ``out +=
identity``) makes the forward fail.  A tensor hook on the output, registered
by a forward hook, receives the same gradient and allows in-place ops after
the module: autograd gives hooks registered before an in-place change the
gradient of the value before that change (hook-semantics.md, section 5;
``tests/behaviour/test_legacy_fix_pattern.py`` shows both with real torch).

The helper is one module-level function that the fixed registrations share::

    layer.register_forward_hook(output_grad_hook(log))

Only text and the AST here: no torch (this runs in the static pass).
"""

from __future__ import annotations

import ast

from hooklint.findings import Edit, Location
from hooklint.static.context import FileContext
from hooklint.static.notebook import CELL_BOUNDARY, MAGIC_MARK
from hooklint.static.semantic import SemanticModel
from hooklint.static.tree_walk import walk_tree

HELPER_NAME = "output_grad_hook"

_TEMPLATE = '''\
def {name}(hook):
    """Forward hook that gives `hook`, a legacy backward hook, the gradient of the
    module's output as `register_backward_hook` did (grad_input is None), in a way
    that in-place ops after the module do not break.  Added by hooklint (HKL101)."""

    def forward_hook(module, inputs, output):
        if isinstance(output, (tuple, list)) and output:
            output = output[0]  # as the legacy hook: the first output
        if getattr(output, "requires_grad", False):
            def call_hook(grad):
                hook(module, None, (grad,))

            output.register_hook(call_hook)

    return forward_hook
'''


def helper_source(name: str = HELPER_NAME) -> str:
    return _TEMPLATE.format(name=name)


def _same_function(stmt: ast.stmt, name: str) -> bool:
    expected = ast.parse(helper_source(name)).body[0]
    return isinstance(stmt, ast.FunctionDef) and stmt.name == name and ast.dump(stmt) == ast.dump(expected)


def existing_helper(tree: ast.Module) -> str | None:
    """The name of a helper this fix already wrote at the top level, if any."""
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name.startswith(HELPER_NAME) \
                and _same_function(stmt, stmt.name):
            return stmt.name
    return None


def _identifiers(model: SemanticModel) -> set[str]:
    names: set[str] = set()
    for node in walk_tree(model.tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)  # `mod.output_grad_hook`: not a clash, but not worth the doubt
    return names


def free_name(model: SemanticModel) -> str:
    """A name no identifier of the file uses, so the helper shadows nothing
    and nothing shadows it where a registration calls it."""
    taken = _identifiers(model)
    if HELPER_NAME not in taken:
        return HELPER_NAME
    index = 2
    while f"{HELPER_NAME}_{index}" in taken:
        index += 1
    return f"{HELPER_NAME}_{index}"


def _is_import_block(stmt: ast.stmt, index: int) -> bool:
    if index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
            and isinstance(stmt.value.value, str):
        return True  # the module docstring
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(stmt, ast.Try):  # try: import x / except ImportError: ...
        return all(isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass, ast.Assign)) for s in stmt.body)
    return False


def _top_level_statement(tree: ast.Module, node: ast.AST) -> int | None:
    row = getattr(node, "lineno", None)
    if row is None:
        return None
    for index, stmt in enumerate(tree.body):
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        if first <= row <= (stmt.end_lineno or stmt.lineno):
            return index
    return None


def insertion_edit(ctx: FileContext, first_use: ast.AST, name: str) -> Edit | None:
    """The edit that writes the helper at the top level, after the imports and
    before the top-level statement holding ``first_use`` (the file's first
    legacy registration: every fix of the file computes the same edit, which
    the fix engine then applies once)."""
    tree = ctx.tree
    limit = _top_level_statement(tree, first_use)
    if limit is None:
        return None
    # In a notebook the helper goes into the cell of the first use: an edit
    # in another cell would make the fix cross cells, which is never applied.
    floor = _cell_start_row(ctx, first_use.lineno)  # type: ignore[attr-defined]
    index = 0
    while index < limit and tree.body[index].lineno < floor:
        index += 1
    # IPython magics at the top of the cell stay there: a cell magic
    # (`%%time`) must be the cell's first line, or the cell no longer runs
    while index < limit and _is_masked_magic(ctx, tree.body[index]):
        floor = tree.body[index].end_lineno + 1  # type: ignore[operator]
        index += 1
    start = index
    while index < limit and _is_import_block(tree.body[index], index - start):
        index += 1
    anchor = tree.body[index]
    row = min([anchor.lineno] + [d.lineno for d in getattr(anchor, "decorator_list", [])])
    # keep a comment block that introduces the anchor next to it (not the
    # file's header: a shebang, a licence, an encoding line)
    top = row
    while top > floor and ctx.line(top - 1).lstrip().startswith("#"):
        top -= 1
    if top > floor:
        row = top
    blank_above = 0
    while row - 1 - blank_above >= floor and not ctx.line(row - 1 - blank_above).strip():
        blank_above += 1
    before = "" if row - blank_above <= floor else "\n" * max(0, 2 - blank_above)
    content = before + helper_source(name) + "\n\n"
    return Edit(content, Location(row, 1), Location(row, 1))


def _is_masked_magic(ctx: FileContext, stmt: ast.stmt) -> bool:
    """A notebook line of IPython syntax, which the notebook reader turned
    into `pass  # hooklint: ipython N` (see hooklint.static.notebook)."""
    return isinstance(stmt, ast.Pass) and MAGIC_MARK in ctx.line(stmt.lineno)


def _cell_start_row(ctx: FileContext, row: int) -> int:
    """The first row of the notebook cell holding ``row`` (1 outside notebooks)."""
    for above in range(row - 1, 0, -1):
        if ctx.line(above).strip() == CELL_BOUNDARY:
            return above + 1
    return 1


def for_file(ctx: FileContext, first_use: ast.AST) -> tuple[str | None, Edit | None]:
    """(the helper's name, the edit that writes it, None when it is there
    already) for this file; (None, None) when it cannot be placed.  Computed
    once per file: every fix of the file shares it."""
    cached = getattr(ctx, "_hl_output_grad_hook", None)
    if cached is None:
        name = existing_helper(ctx.tree)
        if name is not None:
            cached = (name, None)
        else:
            name = free_name(ctx.model)
            insertion = insertion_edit(ctx, first_use, name)
            cached = (name, insertion) if insertion is not None else (None, None)
        ctx._hl_output_grad_hook = cached  # type: ignore[attr-defined]
    return cached
