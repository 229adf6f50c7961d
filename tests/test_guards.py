"""The early-exit guard reasoning that tells HKL501 a fall-off path cannot run."""

import ast

import pytest

from hooklint.static.core.guards import fall_off_is_excluded


def _func(src: str) -> ast.FunctionDef:
    node = ast.parse(src).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


@pytest.mark.parametrize("src", [
    # monai's shape: not (a or b) returned early, then a, then b
    "def f(a, b):\n    if not (a or b):\n        return 0\n    if a:\n        return 1\n    if b:\n        return 2\n",
    # `is not None` is the negation of `is None`
    "def f(x):\n    if x is None:\n        return 0\n    if x is not None:\n        return 1\n",
    # an elif chain and an else that returns
    "def f(a):\n    if a:\n        return 1\n    elif not a:\n        return 2\n",
    "def f(a):\n    if a:\n        pass\n    else:\n        return 0\n    if a:\n        return 1\n",
])
def test_contradicting_guards_exclude_the_end(src):
    assert fall_off_is_excluded(_func(src))


@pytest.mark.parametrize("src", [
    # neither a nor b: the end is reached
    "def f(a, b):\n    if a:\n        return 1\n    if b:\n        return 2\n",
    # the guard's name is rebound between the two tests: nothing is known
    "def f(a):\n    if not a:\n        return 0\n    a = g()\n    if a:\n        return 1\n",
    # no guards at all
    "def f(a):\n    print(a)\n",
])
def test_a_reachable_end_stays_reachable(src):
    assert not fall_off_is_excluded(_func(src))
