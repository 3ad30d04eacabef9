"""A torch module traced into the IR: ``torch.export``, core ATen, then one table row per op.

Why ``torch.export.export(..., strict=False)`` and ``run_decompositions()``: it traces the
shipped layers ``torch.fx.symbolic_trace`` cannot (data-dependent Python, HF's control
flow) and leaves a graph of core ATen overloads, so the table of
:mod:`resverify.blocks.aten` stays small. The program's inputs are the module's inputs
(named after their placeholders, ``x``) *and* its parameters and buffers (named after their
``state_dict`` names, ``ln.weight``), so the exact oracle judges every parameter's gradient
too; each FX node becomes IR nodes named after it (``mm_1``, ``mm_1.1`` ...).

Nothing is approximated: every node no row expresses exactly is collected, and the trace
fails with one :class:`NotInIR` listing them all (``aten op aten.bmm.default at node bmm_1
is not in the IR``); nodes that only read a refused one are not listed again. What was
traced is what the module computes *for these example inputs' shapes and dtype*: the
program is traced again for each dtype judged.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from resverify.blocks import constants
from resverify.blocks.aten import ROWS, Unmapped
from resverify.blocks.patterns import MaskCondition, Match, find
from resverify.spec.errors import InvalidProgram, ResverifyError
from resverify.spec.ir import ATTRIBUTES, Input, Node, Program
from resverify.spec.ops import OP_TABLE

__all__ = ["NotInIR"]


class NotInIR(ResverifyError, NotImplementedError):
    """The traced module uses ATen ops (or forms of them) the IR cannot express exactly.

    ``refused`` holds one ``(aten op, node, reason)`` per refused node, in graph order."""

    def __init__(self, refused: Sequence[tuple[str, str, str]]) -> None:
        self.refused = tuple(refused)
        lines = [f"aten op {op} at node {node} is not in the IR" + (f" ({why})" if why else "")
                 for op, node, why in self.refused]
        super().__init__(f"{len(lines)} node(s) cannot be traced into the IR: "
                         + "; ".join(lines))

    @property
    def ops(self) -> list[str]:
        """The distinct ATen ops refused, sorted."""
        return sorted({op for op, _, _ in self.refused})


@dataclass(frozen=True)
class Lowered:
    """The IR program of a traced module, and where each of its inputs comes from."""

    program: Program
    user_inputs: tuple[str, ...]
    """The IR names of the module's positional inputs, in order."""
    state: tuple[str, ...]
    """The IR names of the parameters and buffers read (their ``state_dict`` names)."""
    matched: tuple[str, ...] = ()
    """The composites mapped to one IR op (:mod:`resverify.blocks.patterns`), as
    ``"rms_norm at mul_1"``."""
    constants: Mapping[str, torch.Tensor] = field(default_factory=dict)
    """The constants lifted to inputs (:mod:`resverify.blocks.constants`), by IR name (the
    FX node's), each its realised value in the program's dtype (a mask as 0/1)."""
    exported: Any = None
    """The exported program the IR was lowered from (core ATen, the graph that was walked)."""
    names: Mapping[str, str] = field(default_factory=dict)
    """Each FX node's IR name (placeholders and call nodes whose value the IR holds), in
    graph order: where the IR reads the value torch's run of that node gives."""
    untrained: tuple[str, ...] = ()
    """The inputs torch's autograd does not differentiate (batch norm's running statistics):
    the judge asks no gradient of them."""
    tied: Mapping[str, str] = field(default_factory=dict)
    """Parameters that are one tensor under two names (tied embeddings: ``lm_head.weight``
    is ``embed_tokens.weight``), each later name to the first: one input of the program,
    read at every use, so its gradient is the sum over the uses, as torch's is."""
    conditions: tuple[MaskCondition, ...] = ()
    """What the matches hold to on the judged inputs (an additive mask's scores small
    enough for ``masked_softmax``): :mod:`resverify.blocks.exact` checks them."""


class _Downstream(ResverifyError):
    """An argument was itself refused: the node is skipped, not listed again."""


_DTYPE_NAMES = {torch.float64: "float64", torch.float32: "float32",
                torch.float16: "float16", torch.bfloat16: "bfloat16"}
"""The IR's name of each floating torch dtype."""


@dataclass
class _Walk:
    """The walk's state: each FX node's IR name(s), the nodes emitted, the program's dtype
    (its inputs'), and the dtype each IR value is computed in where it is not that one (a
    ``cast`` and what follows it: :func:`~resverify.spec.ir.infer_dtypes`' rule)."""

    dtype: torch.dtype
    names: dict[str, Any]
    nodes: list[Node]
    folded: Mapping[str, torch.Tensor | None] = field(default_factory=dict)
    """Every constant node's realised value (:func:`resverify.blocks.constants.fold`)."""
    lifted: dict[str, torch.Tensor] = field(default_factory=dict)
    """The constants read by the program so far, by IR name."""
    dtypes: dict[str, str] = field(default_factory=dict)
    current: str = ""
    frozen: set[str] = field(default_factory=set)
    """The IR names of inputs torch's autograd does not differentiate."""
    emitted: int = 0
    """IR nodes emitted for the current FX node: the first is named after it, the next
    ``<name>.1``, ``<name>.2`` ..."""

    def begin(self, name: str) -> None:
        self.current, self.emitted = name, 0

    def tensor(self, arg: Any) -> str:
        if not isinstance(arg, torch.fx.Node):
            raise Unmapped(f"a non-tensor argument {arg!r} where a tensor is expected")
        if arg.name in self.folded:
            return self._lift(arg.name, self.folded[arg.name], mask=False)
        name = self.names.get(arg.name)
        if name is None:
            raise _Downstream
        if not isinstance(name, str):
            raise Unmapped(f"node {arg.name} has several outputs")
        return name

    def kept(self, arg: Any) -> str:
        """The entries an additive mask keeps (its zeros) as a 0/1 mask, ``<node>.kept``."""
        value = self.folded.get(getattr(arg, "name", ""))
        if value is None:
            raise Unmapped(f"the additive mask {getattr(arg, 'name', arg)} is not a constant")
        return self._lift(f"{arg.name}.kept", value == 0, mask=True)

    def mask(self, arg: Any) -> str:
        if not isinstance(arg, torch.fx.Node) or arg.name not in self.folded:
            raise Unmapped(f"the mask {getattr(arg, 'name', arg)} depends on the data (only "
                           "a constant mask is mapped)")
        return self._lift(arg.name, self.folded[arg.name], mask=True)

    def constant(self, arg: Any) -> torch.Tensor:
        value = self.folded.get(arg.name) if isinstance(arg, torch.fx.Node) else None
        if value is None:
            raise Unmapped(f"{getattr(arg, 'name', arg)} depends on the data (only a constant "
                           "is mapped)")
        return value

    def number(self, value: float, operand: str | None = None) -> str:
        """A Python number operand lifted as a constant of shape (). Beside an ``operand``
        computed in float32 or float64, the number rounded to nearest in that dtype, which
        is what torch's CPU kernel computes with (a Python scalar does not promote a tensor,
        and those dtypes' op math is their own: the scalar is read in it), lifted in the
        program's dtype and ``cast`` (exactly) to the operand's where they differ, and
        refused if the program's dtype cannot hold it; beside a half-precision operand
        (whose op math is float32) or with no operand, the number must be exact in the
        program's dtype, or it is refused."""
        dtype = getattr(torch, operand) if operand in ("float32", "float64") else None
        held = torch.tensor(value, dtype=dtype or self.dtype)
        if dtype is None and float(held) != value:
            raise Unmapped(f"the number {value!r} is not exact in {self.dtype}")
        return self._lift(f"{self.current}.number", held, mask=False)

    def _lift(self, name: str, value: torch.Tensor | None, mask: bool) -> str:
        """A constant as an input of the program: a mask as 0/1 in the program's dtype, a
        floating value only in the program's dtype."""
        if value is None:
            raise Unmapped(f"the constant {name} has no tensor value")
        if mask:
            value = (value != 0).to(self.dtype)
        elif not value.is_floating_point() or value.dtype not in _DTYPE_NAMES:
            raise Unmapped(f"the constant {name} is {value.dtype} (only a where mask may be)")
        elif not bool(torch.isfinite(value).all()):
            raise Unmapped(f"the constant {name} holds an infinity or NaN (an input of the "
                           "program is a real number: an additive mask of -inf is mapped only "
                           "where it masks a softmax whose every row keeps a score)")
        if value.dtype != self.dtype:
            return self._widened(name, value)
        self.lifted.setdefault(name, value)
        return name

    def _widened(self, name: str, value: torch.Tensor) -> str:
        """A constant of another floating dtype (the float32 zeros of a bfloat16 layer's
        masked-row guard): lifted in the program's dtype, then ``cast`` to its own, when
        every value is exact in the program's dtype (so the cast gives it back exactly);
        refused otherwise."""
        held = value.to(self.dtype)
        if not bool((held.to(value.dtype) == value).all()):
            raise Unmapped(f"the constant {name} is {value.dtype} and not exact in the "
                           f"program's {self.dtype}")
        self.lifted.setdefault(name, held)
        return self.emit("cast", [name], source=_DTYPE_NAMES[self.dtype],
                         target=_DTYPE_NAMES[value.dtype])

    def shape(self, arg: Any) -> tuple[int, ...]:
        return tuple(int(n) for n in arg.meta["val"].shape)

    def untrained(self, arg: Any) -> None:
        self.frozen.add(self.tensor(arg))

    def dtype_of(self, name: str) -> str:
        """The dtype the IR value ``name`` is computed in."""
        return self.dtypes.get(name, _DTYPE_NAMES[self.dtype])

    def emit(self, op: str, args: Sequence[str], **attributes: Any) -> str:
        if op not in OP_TABLE:
            raise Unmapped(f"needs the IR op {op!r}")
        name = self.current if self.emitted == 0 else f"{self.current}.{self.emitted}"
        exact = {k: v for k, v in attributes.items() if k in ATTRIBUTES}
        params = {k: v for k, v in attributes.items() if k not in ATTRIBUTES}
        try:
            node = Node(name, op, tuple(args), **exact, params=params)
        except (TypeError, InvalidProgram) as exc:  # a row's attributes the op does not take
            raise Unmapped(f"the IR's {op} refuses attributes {attributes}: {exc}") from None
        try:
            self.dtypes[name] = OP_TABLE[op].dtype([self.dtype_of(a) for a in node.args],
                                                   node.attribute)
        except InvalidProgram as exc:  # torch promotes; the IR computes in one dtype
            raise Unmapped(f"{exc} (torch promotes them)") from None
        self.nodes.append(node)
        self.emitted += 1
        return name


def lower(module: nn.Module, args: Sequence[torch.Tensor]) -> Lowered:
    """Trace ``module(*args)`` into an IR program (raises :class:`NotInIR` listing every
    node it cannot express). ``args`` are tensors of one floating dtype; the module's
    parameters and floating buffers are in that dtype too."""
    return _lower_graph(_export(module, args), args[0].dtype)


def _export(module: nn.Module, args: Sequence[torch.Tensor]) -> Any:
    """``module(*args)`` exported in core ATen (``torch.export`` then its decompositions)."""
    with warnings.catch_warnings():
        # torch.export's own use of its deprecated LeafSpec (torch 2.13), not the caller's
        warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)`", FutureWarning)
        return torch.export.export(module, tuple(args), strict=False).run_decompositions()


def _lower_graph(exported: Any, dtype: torch.dtype) -> Lowered:
    walk = _Walk(dtype, {}, [], constants.fold(exported.graph.nodes, _tensor_constants(exported)))
    refused: list[tuple[str, str, str]] = []
    inputs, user, state, tied = _inputs(exported, walk, refused)
    output = None
    matches = find(exported.graph.nodes, walk.folded)
    absorbed = {name for match in matches.values() for name in match.absorbed}
    absorbed |= set(walk.folded)
    for node in exported.graph.nodes:
        if node.op == "call_function" and node.name not in absorbed:
            _visit(walk, node, refused, matches.get(node.name))
        elif node.op == "output":
            output = _output(walk, node, refused)
    if refused or output is None:
        raise NotInIR(refused)
    inputs += [Input(name, tuple(value.shape)) for name, value in walk.lifted.items()]
    return Lowered(Program(tuple(inputs), tuple(walk.nodes), output), tuple(user),
                   tuple(state), tuple(f"{m.op} at {m.root}" for m in matches.values()),
                   dict(walk.lifted), exported,
                   {k: v for k, v in walk.names.items() if isinstance(v, str)},
                   tuple(n for n in state if n in walk.frozen), tied,
                   tuple(m.condition for m in matches.values() if m.condition is not None))


def _tensor_constants(exported: Any) -> dict[str, torch.Tensor]:
    """The tensors ``torch.export`` lifted to placeholders (a ``torch.tensor(...)`` made in
    ``forward``), and the non-persistent buffers (a rotary embedding's ``inv_freq``: a table
    the module derives from its config, not state it saves or trains), by placeholder name:
    constants like any other."""
    kinds = torch.export.graph_signature.InputKind
    return {spec.arg.name: exported.constants[spec.target]
            for spec in exported.graph_signature.input_specs
            if spec.kind == kinds.CONSTANT_TENSOR
            or (spec.kind == kinds.BUFFER and spec.persistent is False)}


def _inputs(exported: Any, walk: _Walk, refused: list[tuple[str, str, str]]
            ) -> tuple[list[Input], list[str], list[str], dict[str, str]]:
    """The program's inputs from the graph signature: user inputs by placeholder name,
    parameters and buffers by ``state_dict`` name (a tensor held under two names, tied
    weights, is one input under its first: the last item maps the others to it); a lifted
    constant is refused."""
    kinds = torch.export.graph_signature.InputKind
    inputs: list[Input] = []
    user: list[str] = []
    state: list[str] = []
    first: dict[int, str] = {}
    tied: dict[str, str] = {}
    placeholders = {n.name: n for n in exported.graph.nodes if n.op == "placeholder"}
    for spec in exported.graph_signature.input_specs:
        node = placeholders[spec.arg.name]
        if spec.kind != kinds.USER_INPUT and spec.arg.name in walk.folded:
            continue  # a lifted tensor or a non-persistent buffer: a constant
        if spec.kind == kinds.USER_INPUT:
            name, into = spec.arg.name, user
        elif spec.kind in (kinds.PARAMETER, kinds.BUFFER):
            name, into = spec.target, state
            held = id(exported.state_dict.get(name, node))
            if held in first:
                tied[name] = walk.names[node.name] = first[held]
                continue
            first[held] = name
        else:
            refused.append((f"placeholder ({spec.kind.name})", node.name,
                            "a lifted constant or token is not an input of the program"))
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dtype != walk.dtype:
            if node.users:
                what = getattr(value, "dtype", type(value).__name__)
                refused.append(("placeholder", node.name, f"an input of {what}, the program "
                                f"is {walk.dtype}"))
            continue
        walk.names[node.name] = name
        into.append(name)
        inputs.append(Input(name, tuple(int(n) for n in value.shape)))
    return inputs, user, state, tied


def _visit(walk: _Walk, node: Any, refused: list[tuple[str, str, str]],
           match: Match | None) -> None:
    """Map one call node through its row (a pattern's, where one is rooted at it),
    recording a refusal instead of raising."""
    op = str(node.target)
    walk.begin(node.name)
    try:
        if node.target is operator.getitem:
            walk.names[node.name] = _item(walk, node)
            return
        row = ROWS.get(op) if match is None else (lambda g, _: match.emit(g))
        if row is None:
            raise Unmapped("")
        value = row(walk, node)
        _check_dtype(walk, node, value)
        walk.names[node.name] = value
    except _Downstream:
        return
    except Unmapped as why:
        refused.append((op, node.name, str(why)))


def _item(walk: _Walk, node: Any) -> str:
    source, index = node.args
    outputs = walk.names.get(source.name)
    if outputs is None:
        raise _Downstream
    picked = outputs[index] if isinstance(outputs, tuple) else None
    if picked is None:
        raise Unmapped(f"output {index} of {source.name} is not expressed")
    return str(picked)


def _check_dtype(walk: _Walk, node: Any, value: str | tuple[str | None, ...]) -> None:
    """Refuse a node whose value torch computes in another dtype than its IR value (a
    reduction with ``dtype=``, a promotion the row does not cast for)."""
    values = node.meta.get("val")
    tensors = values if isinstance(values, tuple | list) else (values,)
    names = value if isinstance(value, tuple) else (value,)
    for tensor, name in zip(tensors, names, strict=False):
        if isinstance(tensor, torch.Tensor) and name is not None and \
                _DTYPE_NAMES.get(tensor.dtype) != walk.dtype_of(name):
            raise Unmapped(f"computes in {tensor.dtype}, its IR value in "
                           f"{walk.dtype_of(name)}")


def _output(walk: _Walk, node: Any, refused: list[tuple[str, str, str]]) -> str | None:
    results = node.args[0]
    if len(results) != 1:
        refused.append(("output", node.name, f"the module returns {len(results)} values, "
                        "a program has one output"))
        return None
    return walk.names.get(results[0].name) if isinstance(results[0], torch.fx.Node) else None
