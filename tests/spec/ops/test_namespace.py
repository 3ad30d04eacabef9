"""The array namespace reads each function an op's array form calls by its name: the
adapter's own first, then the library's modules in order; the norms from the adapter alone."""

from __future__ import annotations

import types
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from resverify.spec.errors import UsageError
from resverify.spec.ops import OP_TABLE, ArrayNamespace


def module(name: str, **functions: Any) -> types.ModuleType:
    made = types.ModuleType(name)
    for key, value in functions.items():
        setattr(made, key, value)
    return made


def test_a_function_is_the_adapters_own_else_the_first_modules_that_has_it() -> None:
    first, second = module("first", tanh=np.tanh), module("second", tanh=np.sin, relu=abs)
    xp = ArrayNamespace(first, second, sum=np.prod)
    assert xp.tanh is np.tanh, "the first module that has tanh"
    assert xp.relu is abs, "a module further on, where the first lacks it"
    assert xp.sum is np.prod, "the adapter's own, before any module"


def test_a_function_no_module_has_is_a_usage_error_naming_it() -> None:
    xp = ArrayNamespace(module("lib", tanh=np.tanh))
    with pytest.raises(UsageError, match=r"\(lib\) has no function 'sigmoid'.*sigmoid=\.\.\."):
        xp.function("sigmoid")


def test_a_norm_comes_from_the_adapter_alone() -> None:
    """A library function named layer_norm need not take (x, eps): only the adapter's own
    counts; without one the entry composes the norm."""
    lib = module("lib", layer_norm=lambda *args: pytest.fail("the library's was called"))
    assert ArrayNamespace(lib).own_norm("layer_norm") is None
    row = np.array([[1.0, 3.0]])
    composed = OP_TABLE["layer_norm"].array(ArrayNamespace(lib), [row], Fraction(0))
    assert composed.tolist() == [[-1.0, 1.0]], f"{composed.tolist()}, but should be [[-1, 1]]"


def test_a_unary_ops_array_form_is_the_library_function_of_its_name() -> None:
    lib = module("lib", tanh=lambda a: ("tanh", a), sigmoid=lambda a: ("sigmoid", a),
                 relu=lambda a: ("relu", a), sum=lambda a: ("sum", a))
    for name in ("tanh", "sigmoid", "relu", "sum"):
        got = OP_TABLE[name].array(ArrayNamespace(lib), ["x"], None)
        assert got == (name, "x"), f"{name}: {got}, but should be ({name!r}, 'x')"
