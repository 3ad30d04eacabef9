"""The seed fixtures as IR programs and requests (values from SEEDS.md S01–S17).

Every value here is a dyadic rational, so any correct float64 or float32 run reproduces
the expected results exactly.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request

SEED_X = np.array([2.0, -1.0])
SEED_W = np.array([[0.5, -1.0], [2.0, 0.25]])
SEED_COT = np.array([1.0, 1.0])
STACK_W = np.array([[-0.25, 0.0], [0.0, -0.25]])


def linear_block() -> Program:
    """``y = residual_add(x, linear(x, w))`` for x of shape (2,), w of shape (2, 2)."""
    return Program(
        (Input("x", (2,)), Input("w", (2, 2))),
        (Node("f", "linear", ("x", "w")), Node("y", "residual_add", ("x", "f"))),
        "y",
    )


def linear_block_request(w: np.ndarray = SEED_W, dtype: str = "float64") -> Request:
    """S06 (and S07 with ``w`` all zeros): x=[2,-1], ȳ=[1,1]."""
    return Request(linear_block(), {"x": SEED_X, "w": np.asarray(w)}, dtype, SEED_COT)


def shared_operand_request(cotangent: tuple[float, ...] = (1.5, -2.0),
                           dtype: str = "float64") -> Request:
    """S10: the same input on both sides of the merge, ``residual_add(x, x)``."""
    program = Program((Input("x", (2,)),), (Node("y", "residual_add", ("x", "x")),), "y")
    return Request(program, {"x": SEED_X}, dtype, np.array(cotangent))


def stack_program(depth: int, residual: bool, width: int = 2) -> Program:
    """``depth`` linear layers ``w0..`` over x, each wrapped in a residual merge if asked."""
    inputs = [Input("x", (width,))] + [Input(f"w{i}", (width, width)) for i in range(depth)]
    nodes, prev = [], "x"
    for i in range(depth):
        nodes.append(Node(f"f{i}", "linear", (prev, f"w{i}")))
        if residual:
            nodes.append(Node(f"h{i}", "residual_add", (prev, f"f{i}")))
            prev = f"h{i}"
        else:
            prev = f"f{i}"
    return Program(tuple(inputs), tuple(nodes), prev)


def stack_request(depth: int, residual: bool, dtype: str = "float64") -> Request:
    """S11: ``depth`` layers with W = diag(-0.25, -0.25), x=[2,-1], ȳ=[1,1]."""
    values = {"x": SEED_X}
    values.update({f"w{i}": STACK_W for i in range(depth)})
    return Request(stack_program(depth, residual), values, dtype, SEED_COT)


def relu_block(residual: bool) -> Program:
    """S17: ``F(x) = g·relu(x)`` with g as a scale constant, with or without the skip."""
    nodes = [Node("r", "relu", ("x",)), Node("f", "scale", ("r",), Fraction(1, 2))]
    if residual:
        nodes.append(Node("y", "residual_add", ("x", "f")))
    return Program((Input("x", (2,)),), tuple(nodes), "y" if residual else "f")


def relu_block_request(residual: bool, cotangent: object, dtype: str = "float64") -> Request:
    """S17 at x=[-1,2], g=0.5; a unit cotangent reads one row of the Jacobian."""
    return Request(relu_block(residual), {"x": np.array([-1.0, 2.0])}, dtype,
                   np.asarray(cotangent, dtype=np.float64))


def _vec(*values: str) -> tuple[Fraction, ...]:
    return tuple(Fraction(v) for v in values)


Case = tuple[Request, tuple[Fraction, ...], dict[str, tuple[Fraction, ...]]]


def seed_cases() -> dict[str, Case]:
    """Every seed fixture as a request with its exact expected output and gradients (flat)."""
    cases = {
        "S06.linear_block": (linear_block_request(), _vec("1", "-3.25"),
                             {"x": _vec("0.5", "3.25"), "w": _vec("2", "2", "-1", "-1")}),
        "S07.zero_branch": (linear_block_request(w=np.zeros((2, 2))), _vec("2", "-1"),
                            {"x": _vec("1", "1"), "w": _vec("2", "2", "-1", "-1")}),
        "S10.shared_operand": (shared_operand_request(), _vec("4", "-2"),
                               {"x": _vec("3", "-4")}),
        "S17.relu_residual_row0": (relu_block_request(True, [1.0, 0.0]), _vec("-1", "3"),
                                   {"x": _vec("1", "0")}),
        "S17.relu_residual_row1": (relu_block_request(True, [0.0, 1.0]), _vec("-1", "3"),
                                   {"x": _vec("0", "1.5")}),
        "S17.relu_plain_row0": (relu_block_request(False, [1.0, 0.0]), _vec("0", "1"),
                                {"x": _vec("0", "0")}),
        "S17.relu_plain_row1": (relu_block_request(False, [0.0, 1.0]), _vec("0", "1"),
                                {"x": _vec("0", "0.5")}),
    }
    plain = ["2 -1", "-0.5 0.25", "0.125 -0.0625", "-0.03125 0.015625",
             "0.0078125 -0.00390625"]
    residual = ["2 -1", "1.5 -0.75", "1.125 -0.5625", "0.84375 -0.421875",
                "0.6328125 -0.31640625"]
    for kind, rows, factor in (("plain", plain, Fraction(-1, 4)),
                               ("residual", residual, Fraction(3, 4))):
        for depth, row in enumerate(rows):
            cases[f"S11.{kind}_depth{depth}"] = (
                stack_request(depth, kind == "residual"), _vec(*row.split()),
                {"x": (factor**depth, factor**depth)},
            )
    return cases
