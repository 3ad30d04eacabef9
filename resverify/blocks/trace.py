"""What the laws see of a block: its inputs, the stream between its sites, and failures.

Why hooks: a shipped block computes its residual sums inline (``x = x + self._sa_block(...)``),
so no submodule returns them. The stream is still visible where a norm reads or writes it
(see :mod:`resverify.blocks.recipe`): forward hooks on those norms copy it out, so each law
can judge site by site against the stream *the module itself carried*, not one we
recomputed. A hook that fires other than once per call (a norm reused or skipped) means the
block is not wired as its recipe says, which :class:`Unobserved` reports.

Why the failure carries an IR request: the merge ``z = s + alpha * F(s)`` of the failing
site, with the stream ``s`` and the branch value ``F(s)`` as its inputs, is a request of the
exact IR (``residual_add``), so the vector saved for a block replays against the exact
interpreter and any engine. Only a failure *at* a merge has one (:class:`BlockFailure`'s
``merged``): a γ as constructed, a dtype, an input written into or a whole-block zero map
is not a sum, and a vector of ``x + 0`` standing in for it would replay ``ok`` and check
nothing; such a failure is replayed as the block's own example
(:mod:`resverify.blocks.replay`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NoReturn

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from resverify.blocks.recipe import Dims, Recipe, Site
from resverify.properties.assertions import PropertyFailure, element_index
from resverify.spec.errors import ResverifyError
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request

__all__ = []

TORCH_DTYPES: Mapping[str, torch.dtype] = {
    "float64": torch.float64, "float32": torch.float32,
    "bfloat16": torch.bfloat16, "float16": torch.float16}
UNIT_ROUNDOFF: Mapping[str, float] = {
    "float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}
"""Half an ulp of 1: the largest relative error of one rounding to nearest."""


def unit_roundoff(dtype: torch.dtype) -> float:
    """:data:`UNIT_ROUNDOFF` of a torch dtype."""
    return UNIT_ROUNDOFF[next(n for n, t in TORCH_DTYPES.items() if t == dtype)]


class Unjudged(ResverifyError):
    """A law cannot judge this example: its precondition does not hold (the reason). Never
    leaves resverify.blocks: the law's driver counts the example as not judged."""


class Unobserved(Unjudged):
    """The stream could not be read where the recipe says the block carries it."""


class BlockFailure(PropertyFailure):
    """A law broken by a block. ``merged``: the failure is at a site's merge, and
    ``request`` is that merge as it happened (``residual_add(shortcut(s), F(s))``), worth
    saving as a vector; else ``request`` is a placeholder of the input's shape, never saved
    (the block replay, :mod:`resverify.blocks.replay`, is how such a failure is rerun)."""

    def __init__(self, message: str, request: Request, merged: bool) -> None:
        super().__init__(message, request)
        self.merged = merged
        self.figures: dict[str, float] = {}
        """What the law measured on the failing example before it failed (the figures a
        report plots, :func:`measured`); its record keeps them."""


@dataclass(frozen=True)
class Inputs:
    """One example's inputs: the stream ``x``, extra inputs, and the seed that also draws the
    output cotangent (:meth:`cotangent`, of the output's shape, which a projecting block
    changes)."""

    x: torch.Tensor
    context: Mapping[str, torch.Tensor]
    seed: int

    def cotangent(self, like: torch.Tensor) -> torch.Tensor:
        """ȳ for an output like ``like``: normal values, the same for the same seed."""
        gen = torch.Generator().manual_seed(self.seed + 2)
        return torch.randn(like.shape, generator=gen, dtype=torch.float64).to(like.dtype)

    @staticmethod
    def draw(recipe: Recipe, dtype: torch.dtype, batch: int, seq: int, seed: int,
             scale: float = 1.0) -> Inputs:
        """Normal values times ``scale`` from a generator seeded with ``seed``."""
        gen = torch.Generator().manual_seed(seed)

        def values(dims: Dims) -> torch.Tensor:
            shape = [batch if d == "batch" else seq if d == "seq" else int(d) for d in dims]
            return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)

        x = values(recipe.shape)
        return Inputs(x, {k: values(v) for k, v in recipe.context.items()}, seed)


@dataclass(frozen=True)
class Case:
    """A law's question: a built block (``module``, its parameters perturbed; ``pristine``, as
    the factory made it), the dtype and mode it runs in, and the inputs. ``handle`` is a
    non-torch block as its recipe's adapter holds it (a Haiku block's parameters and state;
    ``module`` and ``pristine`` are then placeholders)."""

    recipe: Recipe
    dtype: str
    mode: str
    module: nn.Module
    pristine: nn.Module
    inputs: Inputs
    extra: Mapping[str, Any] = field(default_factory=dict)
    handle: Any = None

    @property
    def stream_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.recipe.stream_dtype or self.dtype]

    def where(self, site: int | None = None) -> str:
        at = "" if site is None else f", site {site} ({self.recipe.sites[site].label})"
        return (f"[{self.recipe.name}{at}, {self.dtype}, {self.mode}, "
                f"seed {self.inputs.seed}]")

    def fail(self, law: str, message: str, site: int | None = None,
             merge: Sequence[torch.Tensor] | None = None) -> NoReturn:
        """Raise the one-line :class:`BlockFailure` of ``law``; ``merge`` is the site's
        ``(shortcut(s), F_1(s), ...)`` (each branch's value) when the failure is at that
        merge, saved as the request of the vector (None: not at a merge, no vector)."""
        __tracebackhide__ = True
        raise BlockFailure(f"{law}: {message} {self.where(site)}",
                           self.request(site, merge), merge is not None)

    def request(self, site: int | None, merge: Sequence[torch.Tensor] | None) -> Request:
        """The IR request of a site's merge as the recipe declares it, from the values the
        block's own parts gave: ``residual_add(β·shortcut(s), alpha·(F_1 + F_2 + ...))``,
        then ``scale`` by 1/c or m (:func:`merge_program`), with a cotangent of the merge's
        shape (the block's ȳ where the shapes agree). Without a merge, a placeholder of the
        input's shape (never saved)."""
        x = self.inputs.x
        declared = None if site is None else self.recipe.sites[site]
        values = list(merge) if merge is not None else [x, torch.zeros_like(x)]
        beta = None if declared is None or isinstance(declared.skip_scale, float | int) \
            else skip_scale(self.module, declared)
        program, tensors = merge_program(declared, values, beta)
        dtype = self.recipe.stream_dtype or self.dtype
        skip = values[0]
        arrays = {name: _numpy(t.to(skip.dtype), dtype) for name, t in tensors.items()}
        return Request(program, arrays, dtype, _numpy(self.inputs.cotangent(skip), dtype))


def merge_program(site: Site | None, values: Sequence[torch.Tensor],
                  beta: torch.Tensor | float | None = None
                  ) -> tuple[Program, dict[str, torch.Tensor]]:
    """The merge of ``site`` over ``values`` (the shortcut's, then each branch's) as an IR
    program and its inputs: ``x`` the shortcut's value, ``f`` the branch's and ``f1``,
    ``f2``, ... the parallel branches', ``beta`` a skip-scale parameter (a constant β is a
    ``scale``), every constant exact (c as the rational ``1/c``)."""
    skip, terms = values[0], list(values[1:])
    shape = tuple(skip.shape)
    names = ["f", *(f"f{j}" for j in range(1, len(terms)))]
    inputs = [Input("x", shape), *(Input(n, shape) for n in names)]
    tensors = {"x": skip, **dict(zip(names, terms, strict=True))}
    nodes: list[Node] = []
    left, right = "x", "f"
    if isinstance(beta, torch.Tensor):
        inputs.append(Input("beta", tuple(beta.shape)))
        tensors["beta"] = beta.detach()
        nodes.append(Node("xs", "mul", ("x", "beta")))
        left = "xs"
    elif beta is not None and beta != 1.0:
        nodes.append(Node("xs", "scale", ("x",), alpha=Fraction(beta)))
        left = "xs"
    for name in names[1:]:
        nodes.append(Node(f"u{name}", "add", (right, name)))
        right = f"u{name}"
    alpha = 1.0 if site is None else site.alpha
    if alpha != 1.0:
        nodes.append(Node("u", "scale", (right,), alpha=Fraction(alpha)))
        right = "u"
    post = Fraction(1) if site is None else \
        Fraction(site.post_factor) / Fraction(site.post_scale)
    nodes.append(Node("y" if post == 1 else "z", "residual_add", (left, right)))
    if post != 1:
        nodes.append(Node("y", "scale", ("z",), alpha=post))
    return Program(tuple(inputs), tuple(nodes), "y"), tensors


def _numpy(t: torch.Tensor, dtype: str) -> np.ndarray:
    """The exact values of ``t`` as a NumPy array of the request's storage dtype."""
    arr = t.detach().to(torch.float64).numpy()
    return arr.astype(np.float32 if dtype == "bfloat16" else dtype)


@dataclass(frozen=True)
class Observed:
    """One call of the block: the input as given (copied before the call), the output, and
    per site the stream entering it, its sum when visible, and the stream leaving it."""

    x: torch.Tensor
    y: torch.Tensor
    entries: tuple[torch.Tensor, ...]
    sums: tuple[torch.Tensor | None, ...]
    exits: tuple[torch.Tensor, ...]


def _taps(recipe: Recipe) -> list[tuple[str, str, str, int]]:
    """``(submodule, "input"|"output", "entry"|"read"|"sum"|"exit", site)`` for every hook
    (``read``: what site 0's pre-norm reads, which must be the block's input)."""
    taps = []
    for i, site in enumerate(recipe.sites):
        if site.norm == "pre":  # site 0's norm must read the block's input: it is checked
            taps.append((site.norms[0], "input", "entry" if i > 0 else "read", i))
        if site.norm == "post":
            taps.append((site.norms[0], "input", "sum", i))
            taps.append((site.norms[-1], "output", "exit", i))
    return taps


class _Casts(TorchFunctionMode):
    """Remembers, for each tensor a dtype cast returned during a call, the tensor it was
    cast from (a no-op cast returns its own input), so that a norm reading
    ``norm(s.to(bf16))`` gives away ``s``. Every op runs as it came."""

    CASTS = frozenset(("to", "type", "bfloat16", "half", "float", "double"))

    def __init__(self) -> None:
        super().__init__()
        self.sources: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in self.CASTS and isinstance(out, torch.Tensor) \
                and args and isinstance(args[0], torch.Tensor):
            self.sources[id(out)] = (out, args[0])
        return out

    def source(self, value: torch.Tensor) -> torch.Tensor | None:
        """The tensor ``value`` was cast from, None if no cast made it."""
        known = self.sources.get(id(value))
        return known[1] if known is not None and known[0] is value else None


def observe(recipe: Recipe, module: nn.Module, x: torch.Tensor,
            context: Mapping[str, torch.Tensor]) -> Observed:
    """Run the block once on ``x`` (grad mode on, as in training, so no inference-only fast
    path is taken) and read the stream off its norms (for a site that ``reads="cast"``, the
    tensor its norm's input was cast from); :class:`Unobserved` if a tap fired other than
    once, or a cast site's norm read no cast."""
    seen: dict[tuple[str, int], list[torch.Tensor | None]] = {}
    handles = []
    casts = _Casts()
    for name, side, slot, i in _taps(recipe):
        got = seen.setdefault((slot, i), [])
        cast = side == "input" and slot in ("entry", "read") and recipe.sites[i].reads == "cast"

        def keep(_m: nn.Module, args: Any, out: Any = None, *,
                 got: list[torch.Tensor | None] = got, side: str = side,
                 cast: bool = cast) -> None:
            value = args[0] if side == "input" else out
            if cast:
                value = casts.source(value)
            got.append(None if value is None else value.detach().clone())

        sub = module.get_submodule(name)
        handles.append(sub.register_forward_pre_hook(keep) if side == "input"
                       else sub.register_forward_hook(keep))
    given = x.detach().clone()
    try:
        with torch.enable_grad(), casts if any(s.reads == "cast" for s in recipe.sites) \
                else contextlib.nullcontext():
            y = recipe.run(module, x, context)
    finally:
        for handle in handles:
            handle.remove()
        casts.sources.clear()
    for (slot, i), got in seen.items():
        name = next(n for n, _s, sl, j in _taps(recipe) if (sl, j) == (slot, i))
        if len(got) != 1:
            raise Unobserved(f"site {i}'s norm {name!r} ran {len(got)} times in one call of "
                             "the block, the recipe says once")
        if got[0] is None:
            raise Unobserved(f"site {i}'s norm {name!r} read a tensor no dtype cast made, the "
                             "recipe says it reads the stream cast (reads='cast')")
    read = {k: v[0] for k, v in seen.items() if v[0] is not None}
    if ("read", 0) in read:
        diff = first_difference(read[("read", 0)], given)
        first = read[("read", 0)]
        if diff and first.dtype != given.dtype and \
                not first_difference(first, given.to(first.dtype)):
            raise Unobserved(f"site 0's pre-norm {recipe.sites[0].norms[0]!r} reads the "
                             f"block's input x cast to {first.dtype}, not x: a site whose norm "
                             "reads the stream through a cast says reads='cast'")
        if diff:
            raise Unobserved(f"site 0's pre-norm {recipe.sites[0].norms[0]!r} read{diff} "
                             "(expected: the block's input x, the stream entering site 0): "
                             "the recipe names a norm this site does not read")
    return _assemble(recipe, given, y.detach(), read)


def _assemble(recipe: Recipe, x: torch.Tensor, y: torch.Tensor,
              seen: Mapping[tuple[str, int], torch.Tensor]) -> Observed:
    n = len(recipe.sites)
    entries: list[torch.Tensor] = [x]
    exits: list[torch.Tensor] = []
    sums: list[torch.Tensor | None] = []
    for i, site in enumerate(recipe.sites):
        if i > 0:
            entries.append(seen[("entry", i)] if site.norm == "pre" else exits[i - 1])
        if site.norm == "post":
            exits.append(seen[("exit", i)])
            sums.append(seen[("sum", i)])
            continue
        out = y if i == n - 1 else seen[("entry", i + 1)]
        exits.append(out)
        sums.append(out if site.activation is None else None)
    return Observed(x, y, tuple(entries), tuple(sums), tuple(exits))


def shortcut(module: nn.Module, site: Site, s: torch.Tensor) -> torch.Tensor:
    """What the site adds its update to: ``s`` itself, or its projection."""
    return s if site.shortcut == "identity" else module.get_submodule(site.shortcut)(s)


def skip_scale(module: nn.Module, site: Site) -> torch.Tensor | float:
    """β of the site: its constant, or the parameter it names (as the block holds it)."""
    if isinstance(site.skip_scale, str):
        return module.get_parameter(site.skip_scale)
    return site.skip_scale


def site_sum(module: nn.Module, site: Site, skip: torch.Tensor, update: torch.Tensor
             ) -> torch.Tensor:
    """``z = (β·skip + alpha·update) / c`` (or ``· m``, the site's ``post_factor``) as the
    recipe composes it, from the shortcut's value ``skip`` (β, alpha, c and m left out where
    they are 1)."""
    beta = skip_scale(module, site)
    scaled = skip if isinstance(beta, float | int) and beta == 1.0 else skip * beta
    z = scaled + update if site.alpha == 1.0 else scaled + site.alpha * update
    z = z if site.post_scale == 1.0 else z / site.post_scale
    return z if site.post_factor == 1.0 else z * site.post_factor


def site_post(module: nn.Module, site: Site, z: torch.Tensor) -> torch.Tensor:
    """The exit of a site from its sum: ``post(act(z))``."""
    out = torch.relu(z) if site.activation == "relu" else z
    if site.norm == "post":
        for name in site.norms:
            out = module.get_submodule(name)(out)
    return out


def site_exit(module: nn.Module, site: Site, s: torch.Tensor, update: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(z, exit)`` of a site from its entry and the branch's update, as the recipe says:
    ``z = (β·shortcut(s) + alpha * update) / c``, ``exit = post(act(z))``."""
    z = site_sum(module, site, shortcut(module, site, s), update)
    return z, site_post(module, site, z)


@contextlib.contextmanager
def with_parameter(module: nn.Module, name: str, value: torch.Tensor | float) -> Iterator[None]:
    """Parameter ``name`` set to ``value`` for the block, restored afterwards."""
    param = module.get_parameter(name)
    old = param.detach().clone()
    with torch.no_grad():
        param.copy_(torch.as_tensor(value, dtype=param.dtype).expand_as(param))
    try:
        yield
    finally:
        with torch.no_grad():
            param.copy_(old)


@contextlib.contextmanager
def drop_prob(module: nn.Module, site: Site, value: float | None) -> Iterator[None]:
    """The site's drop-path probability set to ``value`` (None: left as built)."""
    subs = [module.get_submodule(n) for n in site.drop_path]
    old = [getattr(s, site.drop_prob_attr) for s in subs]
    if value is not None:
        for sub in subs:
            setattr(sub, site.drop_prob_attr, value)
    try:
        yield
    finally:
        for sub, was in zip(subs, old, strict=True):
            setattr(sub, site.drop_prob_attr, was)


@contextlib.contextmanager
def no_drop(module: nn.Module, recipe: Recipe) -> Iterator[None]:
    """Every drop path of the block at probability 0: the realised mask is all ones."""
    with contextlib.ExitStack() as stack:
        for site in recipe.sites:
            stack.enter_context(drop_prob(module, site, 0.0))
        yield


def zeroed(module: nn.Module, names: list[str]) -> nn.Module:
    """A copy of ``module`` with the parameters ``names`` set to zero."""
    out = copy.deepcopy(module)
    with torch.no_grad():
        for name in names:
            out.get_parameter(name).zero_()
    return out


def first_difference(actual: torch.Tensor, expected: torch.Tensor,
                     budget: torch.Tensor | None = None) -> str | None:
    """``[i, j]: a, expected e`` for the first element where ``actual`` differs from
    ``expected`` as values (``-0.0 == 0.0``; beyond ``budget`` when given), or None."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return (f": shape {list(actual.shape)} {actual.dtype}, expected "
                f"{list(expected.shape)} {expected.dtype}")
    a, e = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    bad = ~((a == e) | (torch.isnan(a) & torch.isnan(e)))
    if budget is not None:
        bad &= ~((a - e).abs() <= budget)
    if not bool(bad.any()):
        return None
    index = tuple(int(i) for i in np.unravel_index(int(bad.flatten().nonzero()[0]), a.shape))
    rule = "budget 0" if budget is None else f"budget {float(budget[index])!r}"
    return (f"{element_index(index)} = {float(a[index])!r}, expected {float(e[index])!r} "
            f"(|diff| {abs(float(a[index] - e[index]))!r}, {rule})")


@contextlib.contextmanager
def measured(figures: dict[str, float]) -> Iterator[None]:
    """Within the block, a law's failure carries ``figures``, what it measured on that
    example before it judged (:attr:`BlockFailure.figures`), so a failing record still
    has the figures a report plots."""
    try:
        yield
    except BlockFailure as exc:
        exc.figures = {**figures, **exc.figures}
        raise
