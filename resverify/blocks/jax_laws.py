"""The residual laws on a JAX block: a Haiku module judged like a torch one.

Why a driver of its own: the torch laws read the stream off forward hooks and zero
``nn.Parameter`` s in place; a Haiku block is a pure function ``apply(params, state, x)``
with no hooks. What stays the same is the question and the answer: a :class:`JaxRecipe` is
a :class:`~resverify.blocks.recipe.Recipe` (so listings describe it as any block), plus the
Haiku module it builds and two functions that evaluate the shortcut and the branch F through
that module's *own* submodules. Both transforms build the module under the same name, so
they share one parameter tree: F is the block's F, with the block's parameters.

Examples are drawn as :mod:`resverify.blocks.check` draws them (:func:`~.check.draws`, the
same seeded inputs and cotangent of :class:`~.trace.Inputs`), every parameter gets
``N(0, 0.05²)`` noise, the branch's zeroing parameters a drawn power of two, and every
BatchNorm moving mean noise and moving variance ``1 + |noise|`` (the fresh state, mean 0
and variance 0, would make eval mode divide by ``sqrt(eps)``). Verdicts, messages and the
vector of a failure are the torch laws' (:class:`~.check.LawRecord`,
:func:`~.trace.first_difference`, :func:`~.laws_forward.merge_budget`, the failure's
``residual_add`` request).

Why no ``jit``: the block and the composition ``act(shortcut(x) + F(x))`` then run the same
primitives one by one, so their sums are the same float (judged bitwise); under ``jit`` XLA
may fuse the sum into the BatchNorm differently in the two programs. Float64 runs inside
``jax.enable_x64(True)``, scoped to the example, so nothing outside sees the switch.

Laws that do not apply: ``no_aliasing`` (a JAX array is immutable: no block can write into
its input), ``drop_path`` and ``affine_in_gamma`` (no Haiku ResNet block has a drop path or
a LayerScale); they come back ``unjudged`` with that reason, never as a pass.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import torch
from hypothesis import given
from hypothesis import seed as hypothesis_seed
from torch import nn

from resverify.blocks.check import (
    Draw,
    FailedDraw,
    LawRecord,
    _settings,
    draws,
    judged_record,
    settled,
)
from resverify.blocks.laws import LAWS
from resverify.blocks.laws_forward import merge_budget
from resverify.blocks.recipe import Recipe
from resverify.blocks.trace import TORCH_DTYPES, Case, Inputs, Unjudged, first_difference
from resverify.properties.assertions import PropertyFailure
from resverify.properties.profiles import PROFILES, active_profile
from resverify.spec.errors import UsageError

__all__ = ["JUDGED", "UNJUDGED", "JaxCase", "JaxRecipe", "check_jax_block",
           "judge_jax_example", "no_torch", "plan", "run_jax_law", "validate_jax"]

NOISE = 0.05
BLOCK = "block"
"""The name every transform gives the block, so that they share its parameter tree."""

Parts = Callable[[Any, Any, bool], tuple[Any, Any]]
"""``parts(block, x, is_training) -> (shortcut(x), F(x))`` through the block's submodules."""

UNJUDGED: Mapping[str, str] = {
    "affine_in_gamma": "no Haiku ResNet block has a LayerScale γ",
    "drop_path": "no Haiku ResNet block has a drop path",
    "no_aliasing": "a JAX array is immutable: a block cannot write into its input",
}
"""The torch laws that do not apply to a JAX block, and why."""
JUDGED = ("stream_dtype", "decomposition", "gradient_skip", "zero_branch")
"""The laws judged on a JAX block, in table order (:data:`~.laws.LAWS`), each in the modes
the table gives it."""


def no_torch(dtype: torch.dtype) -> nn.Module:
    """A JAX recipe's ``factory``: there is no torch module to build."""
    raise UsageError("a JAX block has no torch module; check it with "
                     "resverify.blocks.jax_laws.check_jax_block")


@dataclass(frozen=True)
class JaxRecipe(Recipe):
    """A Haiku block: the :class:`Recipe` fields (one site; ``factory`` is :func:`no_torch`)
    plus ``block()`` building the module (called inside a transform, ``name=BLOCK``),
    ``is_training`` passed to its call as the mode says, and ``parts`` evaluating the site's
    shortcut and F through the block's own submodules, in the block's order (a shortcut
    that reads an intermediate of F reads the same one, as the block does). A site's
    ``zero`` names parameters as ``"submodule.param"`` (``"batchnorm_1.scale"``)."""

    block: Callable[[], Any] | None = None
    parts: Parts | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.block is None or self.parts is None:
            raise UsageError(f"recipe {self.name!r}: a JAX recipe needs block and parts")
        if len(self.sites) != 1:
            raise UsageError(f"recipe {self.name!r}: a JAX recipe has one site")
        site = self.sites[0]
        if site.parallel or site.scaled or site.scale_fn is not None or \
                site.reads != "stream":
            raise UsageError(f"recipe {self.name!r}: a JAX recipe's site takes no parallel "
                             "branches, skip_scale, post_scale, post_factor, scale_fn or reads "
                             "(its parts return shortcut(x) and F(x))")


def _jax() -> Any:
    import jax

    return jax


def import_haiku() -> Any:
    """``import haiku``, without the flax stand-in that breaks pickling in the same process.

    Without flax, ``haiku.experimental`` puts a module object in ``sys.modules`` whose every
    attribute raises ``ImportError``. ``pickle`` looks a function's module up by scanning
    ``sys.modules`` with ``getattr`` and stops only at ``AttributeError``, so once haiku is
    imported every later pickle of such an object fails, torch.compile's graph cache among
    them (the ``torch-compile`` backend). The stand-in stays reachable as
    ``haiku.experimental.flax``; only its ``sys.modules`` entry goes.
    """
    import haiku

    stand_in = sys.modules.get("haiku.experimental.flax")
    if stand_in is not None and type(stand_in).__name__ == "FlaxNotInstalled":
        del sys.modules["haiku.experimental.flax"]
    return haiku


def _transforms(recipe: JaxRecipe) -> tuple[Any, Any]:
    """``(whole, parts)``: the block's call, and ``(shortcut(x), F(x))`` through its parts."""
    hk = import_haiku()

    assert recipe.block is not None and recipe.parts is not None
    make, split = recipe.block, recipe.parts

    def whole(x: Any, training: bool) -> Any:
        return make()(x, training, False)

    def parts(x: Any, training: bool) -> tuple[Any, Any]:
        return split(make(), x, training)

    return hk.transform_with_state(whole), hk.transform_with_state(parts)


@contextlib.contextmanager
def _precision(dtype: str) -> Iterator[None]:
    if dtype == "float64":
        with _jax().enable_x64(True):
            yield
    else:
        yield


def _key(name: str) -> tuple[str, str]:
    module, _, param = name.rpartition(".")
    return f"{BLOCK}/~/{module}", param


def _perturb(tree: Any, edit: Callable[[str, str, Any], Any]) -> Any:
    return {mod: {k: edit(mod, k, v) for k, v in leaves.items()} for mod, leaves in tree.items()}


@dataclass(frozen=True)
class JaxCase:
    """One example: the recipe, dtype and mode, the perturbed parameters and state, the
    inputs (drawn as torch draws them), and the torch :class:`~.trace.Case` that formats a
    failure's line and vector (its modules are placeholders, never called)."""

    recipe: JaxRecipe
    dtype: str
    mode: str
    params: Any
    state: Any
    inputs: Inputs
    view: Case

    @property
    def training(self) -> bool:
        return self.mode == "train"

    def x(self) -> Any:
        return _jnp(self.inputs.x)

    def fail(self, law: str, message: str, merge: tuple[Any, Any] | None = None) -> NoReturn:
        __tracebackhide__ = True
        pair = None if merge is None else (_torch(merge[0]), _torch(merge[1]))
        self.view.fail(law, message, 0, pair)


def _jnp(t: torch.Tensor) -> Any:
    """A torch tensor as a JAX array of the same dtype, values exact."""
    import jax.numpy as jnp

    name = str(t.dtype).removeprefix("torch.")
    return jnp.asarray(t.to(torch.float64).numpy()).astype(name)


def _torch(a: Any) -> torch.Tensor:
    """A JAX array as a torch tensor of its own dtype, values exact."""
    values = torch.from_numpy(np.asarray(a, dtype=np.float64).copy())
    return values.to(TORCH_DTYPES.get(str(a.dtype), torch.float64))


def _wide(a: Any) -> torch.Tensor:
    """Its values in float64 (exact): the value laws judge values, stream_dtype the dtype."""
    return torch.from_numpy(np.asarray(a, dtype=np.float64).copy())


def make_case(recipe: JaxRecipe, dtype: str, mode: str, draw: Draw) -> JaxCase:
    """The law's question for one drawn example (call inside :func:`_precision`)."""
    jax = _jax()
    inputs = Inputs.draw(recipe, TORCH_DTYPES[recipe.stream_dtype or dtype], draw.batch,
                         draw.seq, draw.seed, 2.0**draw.input_exp)
    key, x = jax.random.PRNGKey(draw.seed % 2**31), _jnp(inputs.x)
    (params, state), (more, more_state) = (t.init(key, x, True) for t in _transforms(recipe))
    # what the recipe's parts read and the block never called still needs its parameters
    params, state = {**more, **params}, {**more_state, **state}
    rng = np.random.default_rng(draw.seed + 1)
    ends = {_key(n) for n in recipe.sites[0].zero}

    def param(mod: str, name: str, v: Any) -> Any:
        out = np.asarray(v, np.float64) + rng.normal(0.0, NOISE, v.shape)
        return (out * 2.0**draw.weight_exp if (mod, name) in ends else out).astype(v.dtype)

    def stat(mod: str, name: str, v: Any) -> Any:
        if name != "average":
            return v
        noise = np.abs(rng.normal(0.0, NOISE, v.shape))
        out = 1.0 + noise if mod.endswith("var_ema") else noise
        return np.asarray(out).astype(v.dtype)

    view = Case(recipe, dtype, mode, nn.Identity(), nn.Identity(), inputs)
    return JaxCase(recipe, dtype, mode, _perturb(params, param),
                   _perturb(state, stat), inputs, view)


def validate_jax(recipe: JaxRecipe, dtype: str = "float32", seed: int = 0) -> None:
    """Refuse a recipe whose ``zero`` names a parameter the block lacks, with one line."""
    with _precision(dtype):
        case = make_case(recipe, dtype, "eval", Draw(1, 1, seed, 0, 0))
    prefix = f"{BLOCK}/~/"
    known = sorted(f"{m.removeprefix(prefix)}.{p}" for m in case.params for p in case.params[m])
    for name in recipe.sites[0].zero:
        mod, param = _key(name)
        if param not in case.params.get(mod, {}):
            raise UsageError(f"recipe {recipe.name!r}: site 0 names parameter {name!r}, which "
                             f"the block lacks (it has {', '.join(known)})")


def _act(recipe: JaxRecipe, z: Any) -> Any:
    return _jax().nn.relu(z) if recipe.sites[0].activation == "relu" else z


def _run(case: JaxCase, params: Any | None = None) -> tuple[Any, Any]:
    """``(y, (shortcut(x), F(x)))`` with ``params`` (default the case's)."""
    whole, parts = _transforms(case.recipe)
    p = case.params if params is None else params
    y, _ = whole.apply(p, case.state, None, case.x(), case.training)
    pieces, _ = parts.apply(p, case.state, None, case.x(), case.training)
    return y, pieces


def _cotangent(case: JaxCase, y: Any) -> Any:
    """ȳ for output ``y``, drawn in the stream dtype (a wider output gets the same values)."""
    stream = TORCH_DTYPES[case.recipe.stream_dtype or case.dtype]
    return _jnp(case.inputs.cotangent(_torch(y).to(stream)))


def _budget(case: JaxCase, skip: Any, f: Any) -> torch.Tensor | None:
    site = case.recipe.sites[0]
    return None if site.exact else merge_budget(case.dtype, _torch(skip), site.alpha * _torch(f))


def decomposition(case: JaxCase) -> dict[str, float]:
    """``y = act(shortcut(x) + alpha F(x))``, F and the shortcut through the block's own
    submodules with the block's parameters."""
    __tracebackhide__ = True
    site = case.recipe.sites[0]
    y, (skip, f) = _run(case)
    expected = _act(case.recipe, skip + f if site.alpha == 1.0 else skip + site.alpha * f)
    diff = first_difference(_wide(y), _wide(expected), _budget(case, skip, f))
    if diff:
        case.fail("decomposition", f"exit{diff}: y = act(shortcut(x) + alpha*F(x)) with F "
                  "and the shortcut through the block's own submodules", (skip, f))
    return {}


def _zeroed(case: JaxCase) -> Any:
    ends = {_key(n) for n in case.recipe.sites[0].zero}
    return _perturb(case.params, lambda mod, name, v: v * 0 if (mod, name) in ends else v)


def zero_branch(case: JaxCase) -> dict[str, float]:
    """The branch's ``zero`` parameters zeroed: the block is exactly ``act(shortcut(x))``
    (the identity for a pre-activation block without projection), forward and backward."""
    __tracebackhide__ = True
    jax = _jax()
    whole, parts = _transforms(case.recipe)
    params, x, training = _zeroed(case), case.x(), case.training
    names = ", ".join(case.recipe.sites[0].zero)

    def block(x: Any) -> Any:
        return whole.apply(params, case.state, None, x, training)[0]

    def zero_map(x: Any) -> Any:
        return _act(case.recipe, parts.apply(params, case.state, None, x, training)[0][0])

    y, back = jax.vjp(block, x)
    e, e_back = jax.vjp(zero_map, x)
    y_bar = _cotangent(case, y)
    x_bar, e_bar = back(y_bar.astype(y.dtype))[0], e_back(y_bar.astype(e.dtype))[0]
    for what, a, b in (("y", y, e), ("x̄", x_bar, e_bar)):
        diff = first_difference(_wide(a), _wide(b))
        if diff:
            case.fail("zero_branch", f"zeroing {names}: {what}{diff}: with the branch 0, the "
                      f"block is act(shortcut(x)) ({what} of it)")
    return {}


def _params_finite(case: JaxCase, grads: Any) -> None:
    __tracebackhide__ = True
    for mod, leaves in grads.items():
        for name, g in leaves.items():
            if not bool(np.isfinite(np.asarray(g, np.float64)).all()):
                case.fail("gradient_skip", f"parameter {mod}.{name}'s gradient is not finite, "
                          "expected finite")


def gradient_skip(case: JaxCase) -> dict[str, float]:
    """``x̄ - shortcut'ᵀ z̄ = J_Fᵀ z̄`` with ``z̄`` ȳ through the activation (jax.vjp of the
    block against the composition), and every parameter's gradient finite."""
    __tracebackhide__ = True
    jax = _jax()
    try:
        decomposition(case)
    except PropertyFailure as exc:
        raise Unjudged(f"the forward decomposition fails ({exc})") from None
    whole, parts = _transforms(case.recipe)
    state, training, recipe = case.state, case.training, case.recipe

    def block(p: Any, x: Any) -> Any:
        return whole.apply(p, state, None, x, training)[0]

    def piece(i: int) -> Callable[[Any], Any]:
        return lambda x: parts.apply(case.params, state, None, x, training)[0][i]

    def composed(x: Any) -> Any:
        skip, f = parts.apply(case.params, state, None, x, training)[0]
        return _act(recipe, skip + f)

    y, back = jax.vjp(block, case.params, case.x())
    y_bar = _cotangent(case, y)
    p_bar, x_bar = back(y_bar.astype(y.dtype))
    out, composed_back = jax.vjp(composed, case.x())
    expected = composed_back(y_bar.astype(out.dtype))[0]
    z, act_back = jax.vjp(lambda z: _act(recipe, z), sum(_run(case)[1]))
    z_bar = act_back(y_bar.astype(z.dtype))[0]
    skip = jax.vjp(piece(0), case.x())[1](z_bar)[0]
    branch = jax.vjp(piece(1), case.x())[1](z_bar)[0]
    budget = _budget(case, skip, branch)
    diff = first_difference(_wide(x_bar), _wide(expected), budget)
    if diff:
        alone = first_difference(_wide(x_bar), _wide(branch), budget) is None
        hint = " (x̄ equals J_Fᵀz̄ alone: the skip's gradient is missing)" if alone else ""
        case.fail("gradient_skip", f"x̄{diff}: x̄ = shortcut'ᵀz̄ + J_Fᵀz̄, z̄ = ȳ through the "
                  f"activation{hint}")
    _params_finite(case, p_bar)
    return {}


def stream_dtype(case: JaxCase) -> dict[str, float]:
    """The output carries the recipe's stream dtype; figure: the overflow headroom (log2)."""
    __tracebackhide__ = True
    y, _ = _run(case)
    want = case.recipe.stream_dtype or case.dtype
    if str(y.dtype) != want:
        case.fail("stream_dtype", f"the output is {y.dtype}, expected the declared {want}")
    peak = float(np.abs(np.asarray(y, np.float64)).max())
    largest = float(torch.finfo(TORCH_DTYPES[want]).max)
    return {"headroom_log2": float("inf") if peak == 0 else float(np.log2(largest / peak))}


CHECKS: Mapping[str, Callable[[JaxCase], dict[str, float]]] = {
    "decomposition": decomposition, "zero_branch": zero_branch,
    "gradient_skip": gradient_skip, "stream_dtype": stream_dtype}


def plan(recipe: JaxRecipe, dtypes: Iterable[str] = ()) -> Iterator[tuple[str, str, str]]:
    """``(law, dtype, mode)`` of every judged record, in the order of the torch plan."""
    wanted = list(dtypes)
    for law in JUDGED:
        for dtype in (d for d in recipe.dtypes if not wanted or d in wanted):
            for mode in (m for m in LAWS[law].modes if m in recipe.modes):
                yield law, dtype, mode


def _judge(law: str, case: JaxCase) -> dict[str, float]:
    __tracebackhide__ = True
    try:
        return CHECKS[law](case)
    except (PropertyFailure, Unjudged):
        raise
    except (TypeError, ValueError) as exc:  # the block itself raised (a shape, a dtype)
        first = (str(exc).strip().splitlines() or [""])[0]
        case.fail(law, f"the block raised {type(exc).__name__}: {first}, expected a result")


def _claimed(recipe: JaxRecipe, law: str, dtype: str, mode: str) -> None:
    if law not in LAWS:
        raise UsageError(f"unknown law {law!r}; known: {list(LAWS)}")
    if dtype not in recipe.dtypes or mode not in recipe.modes:
        raise UsageError(f"recipe {recipe.name!r} claims dtypes {list(recipe.dtypes)} and modes "
                         f"{list(recipe.modes)}, not {dtype} {mode}")


def judge_jax_example(recipe: JaxRecipe, law: str, dtype: str, mode: str, draw: Draw
                      ) -> dict[str, float]:
    """One example of one law on a JAX block (:func:`~.check.judge_example`'s twin): its
    figures, the law's failure, or :class:`~.trace.Unjudged` (a law this driver does not
    judge, with why)."""
    __tracebackhide__ = True
    _claimed(recipe, law, dtype, mode)
    if law not in CHECKS:
        raise Unjudged(UNJUDGED.get(law, "a law of torch modules only; not defined for a JAX "
                                    "block"))
    with _precision(dtype):
        return _judge(law, make_case(recipe, dtype, mode, draw))


def run_jax_law(recipe: JaxRecipe, law: str, dtype: str, mode: str, *,
                max_examples: int | None = None, seed: int = 0,
                shrink: bool = True) -> LawRecord:
    """Judge one law on a JAX block in ``dtype`` and ``mode``, as
    :func:`~.check.run_law` does for a torch block."""
    _claimed(recipe, law, dtype, mode)
    if law not in CHECKS:
        why = UNJUDGED.get(law, "a law of torch modules only; not defined for a JAX block")
        return LawRecord(recipe.name, law, dtype, mode, "unjudged", 0, message=why)
    validate_jax(recipe, dtype, seed)  # a recipe's mistake is its one line, before examples
    examples = max_examples or PROFILES.get(active_profile(), PROFILES["ci"]).max_examples
    judged: list[dict[str, float]] = []
    reasons: list[str] = []
    ran = [0]
    last = FailedDraw()

    @hypothesis_seed(seed)
    @_settings(examples, shrink)
    @given(draws())
    def prop(draw: Draw) -> None:
        ran[0] += 1
        with _precision(dtype):
            try:
                with last.kept(draw):
                    judged.append(_judge(law, make_case(recipe, dtype, mode, draw)))
            except Unjudged as exc:
                reasons.append(str(exc))

    try:
        prop()
    except PropertyFailure as exc:
        return LawRecord(recipe.name, law, dtype, mode, "fail", ran[0],
                         message=str(exc).splitlines()[0], failure=exc, asked=examples,
                         draw=last.of(exc))
    return judged_record((recipe.name, law, dtype, mode), examples, ran[0], judged, reasons)


def check_jax_block(recipe: JaxRecipe, dtypes: Iterable[str] | None = None,
                    laws: Iterable[str] | None = None, *, max_examples: int | None = None,
                    seed: int = 0) -> list[LawRecord]:
    """Every law (or ``laws``) on a JAX block in each claimed dtype (or ``dtypes``) and mode,
    as :func:`~.check.check_block`: the laws of :data:`UNJUDGED` come back unjudged, with
    their reason (a law of :data:`~.laws.LAWS` that neither lists is run only when asked).

    >>> from resverify.blocks.catalog import recipe  # doctest: +SKIP
    >>> check_jax_block(recipe("haiku.BlockV1"), ["float32"], max_examples=5)  # doctest: +SKIP
    """
    chosen = set(laws or (n for n in LAWS if n in CHECKS or n in UNJUDGED))
    records: list[LawRecord] = []
    for name in (n for n in LAWS if n in chosen):
        for dtype in dtypes or recipe.dtypes:
            for mode in (m for m in LAWS[name].modes if m in recipe.modes):
                records.append(settled(run_jax_law(recipe, name, dtype, mode,
                                                   max_examples=max_examples, seed=seed),
                                       records))
    return records
