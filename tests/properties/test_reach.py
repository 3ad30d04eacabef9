"""What an example reaches (resverify.properties.reach): live ops, α classes, sizes,
depth and shared operands, and the floor a law is held to."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.properties.cases import Case
from resverify.properties.reach import alpha_class, claimable, live_nodes, reached
from resverify.properties.strategies import merge_case, relu_block, tanh_stack
from resverify.spec.ir import Input, Node, Program


@pytest.mark.parametrize(("alpha", "dtype", "expected"), [
    (Fraction(0), "float64", "zero"),
    (Fraction(3, 4), "bfloat16", "exact"),
    (Fraction(1, 3), "float64", "inexact"),
    (Fraction(1, 2**30), "float16", "inexact"),  # below float16's smallest subnormal
    (Fraction(2**24 + 1), "float32", "inexact"),
    (Fraction(2**24 + 1), "float64", "exact"),
])
def test_alpha_class_is_exactness_in_the_dtype(alpha: Fraction, dtype: str,
                                               expected: str) -> None:
    assert alpha_class(alpha, dtype) == expected, (alpha, dtype)


def test_branch_scaled_by_zero_is_not_live() -> None:
    case = tanh_stack(np.array([0.5, -1.0]), [Fraction(0), Fraction(1, 3)])
    assert live_nodes(case.program) == {"h1", "h0", "x", "s0", "s1", "t1"}, (  # not t0
        case.program.describe())
    tags = reached(case.request("float32"))
    assert {"op:tanh", "alpha:zero", "alpha:inexact", "depth:2", "size:small"} <= tags, tags
    dead = tanh_stack(np.array([0.5]), [Fraction(0)])
    assert "op:tanh" not in reached(dead.request("float32")), "a tanh scaled by 0 counted"


def test_empty_input_reaches_no_op_and_no_alpha() -> None:
    case = relu_block(np.zeros((0,)), Fraction(1, 3), np.zeros((0,)))
    tags = reached(case.request("float64"))
    assert tags == {"size:empty", "depth:1"}, tags


def test_size_classes_and_shared_operand() -> None:
    wide = relu_block(np.ones(9), Fraction(1, 2), np.ones(9)).request("float64")
    scalar = relu_block(np.array(2.0), Fraction(1, 2), np.array(1.0)).request("float64")
    assert {"size:wide", "alpha:exact", "op:relu"} <= reached(wide), reached(wide)
    assert "size:scalar" in reached(scalar), reached(scalar)
    x = np.array([1.0, 2.0])
    shared = Case(Program((Input("x", (2,)),), (Node("y", "residual_add", ("x", "x")),), "y"),
                  {"x": x}, x)
    assert "shared" in reached(shared.request("float64")), shared.program.describe()
    assert "shared" not in reached(wide), "a residual block counted as a shared operand"


def test_refused_program_is_told_as_refused() -> None:
    case = merge_case("residual_add", np.ones((2, 3)), np.ones((3, 2)), None)
    assert reached(case.request("float64")) == {"program:refused", "size:small"}


def test_floor_leaves_out_ops_the_backend_does_not_claim() -> None:
    floor = ["op:tanh", "op:relu", "alpha:inexact", "size:wide"]
    assert claimable(floor, ops={"relu", "scale"}) == ["op:relu", "alpha:inexact", "size:wide"]
    assert claimable(floor, ops={"tanh", "relu"}) == floor
