"""The Haiku adapter: a dm-haiku block answers the block laws through ``(params, apply)``.

Why an adapter and not laws of its own: the laws do not change with the library, only how
the block is asked. A Haiku block is a pure function ``apply(params, state, x)`` with no
hooks, so a :class:`JaxRecipe` is a :class:`~resverify.blocks.recipe.Recipe` (one site) plus
the Haiku module it builds and ``parts``, which evaluates the site's shortcut and F through
that module's *own* submodules. Both transforms build the module under the same name
(:data:`BLOCK`), so they share one parameter tree: F is the block's F, with the block's
parameters. The stream of a one-site block is its input and its output.

Examples are drawn as :mod:`resverify.blocks.check` draws them (the same seeded inputs and
cotangent of :class:`~.trace.Inputs`), every parameter gets ``N(0, 0.05²)`` noise, the
branch's zeroing parameters a drawn power of two, and every BatchNorm moving mean noise and
moving variance ``1 + |noise|`` (the fresh state, mean 0 and variance 0, would make eval mode
divide by ``sqrt(eps)``).

Why no ``jit``: the block and the composition ``act(shortcut(x) + F(x))`` then run the same
primitives one by one, so their sums are the same float (judged bitwise); under ``jit`` XLA
may fuse the sum into the BatchNorm differently in the two programs. Float64 runs inside
``jax.enable_x64(True)``, scoped to a float64 law's run or example (:func:`precision`). A
JAX block's value laws compare values (:meth:`HaikuAdapter.value`, float64), its dtype being
``stream_dtype``'s.

Laws that do not apply to a Haiku block (:data:`INAPPLICABLE`, left out as a torch block's
laws are where it lacks a feature, :func:`~.laws.applicable`): ``no_aliasing`` (a JAX array is
immutable: no block can write into its input) and ``paths`` (torch.compile and torch's fast
paths are torch's). A :class:`JaxRecipe` declares no LayerScale γ and no drop path (the
adapter could not set either), so ``affine_in_gamma`` and ``drop_path`` have nothing to
judge on it, as on a torch block without them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from resverify.blocks.adapter import BlockVjp
from resverify.blocks.recipe import Recipe
from resverify.blocks.records import Draw
from resverify.blocks.trace import TORCH_DTYPES, Case, Inputs, Observed, Unjudged
from resverify.properties.assertions import PropertyFailure
from resverify.spec.errors import UsageError

__all__ = []

NOISE = 0.05
BLOCK = "block"
"""The name every transform gives the block, so that they share its parameter tree."""

Parts = Callable[[Any, Any, bool], tuple[Any, Any]]
"""``parts(block, x, is_training) -> (shortcut(x), F(x))`` through the block's submodules."""

INAPPLICABLE: Mapping[str, str] = {
    "no_aliasing": "a JAX array is immutable: a block cannot write into its input",
    "paths": "torch.compile and torch's fast paths are torch's",
}
"""The laws with nothing to judge on a JAX block, and why."""


def no_torch(dtype: torch.dtype) -> nn.Module:
    """A JAX recipe's ``factory``: there is no torch module to build."""
    raise UsageError("a JAX block has no torch module; check it with "
                     "resverify.blocks.check_block")


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

    adapter: ClassVar[str] = "haiku"
    """A Haiku block answers through :data:`HAIKU`."""

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
        if site.scale is not None or site.drop_path:
            raise UsageError(f"recipe {self.name!r}: a JAX recipe's site declares no "
                             "LayerScale (scale) or drop path (drop_path): the Haiku adapter "
                             "cannot set either, so affine_in_gamma and drop_path would judge "
                             "nothing")


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


def transforms(recipe: JaxRecipe) -> tuple[Any, Any]:
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
def precision(dtype: str) -> Iterator[None]:
    """JAX's float64 switched on for a float64 check, and only for it."""
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
class HaikuBlock:
    """A Haiku block as the laws ask it: its perturbed parameters and state, and the two
    transforms (:func:`transforms`)."""

    params: Any
    state: Any
    whole: Any
    parts: Any


def _jnp(t: torch.Tensor) -> Any:
    """A torch tensor as a JAX array of the same dtype, values exact."""
    import jax.numpy as jnp

    name = str(t.dtype).removeprefix("torch.")
    return jnp.asarray(t.detach().to(torch.float64).numpy()).astype(name)


def _torch(a: Any) -> torch.Tensor:
    """A JAX array as a torch tensor of its own dtype, values exact."""
    values = torch.from_numpy(np.asarray(a, dtype=np.float64).copy())
    return values.to(TORCH_DTYPES.get(str(a.dtype), torch.float64))


def make_case(recipe: JaxRecipe, dtype: str, mode: str, draw: Draw) -> Case:
    """The law's question for one drawn example (call inside :func:`precision`)."""
    jax = _jax()
    inputs = Inputs.draw(recipe, TORCH_DTYPES[recipe.stream_dtype or dtype], draw.batch,
                         draw.seq, draw.seed, 2.0**draw.input_exp)
    key, x = jax.random.PRNGKey(draw.seed % 2**31), _jnp(inputs.x)
    whole, parts = transforms(recipe)
    (params, state), (more, more_state) = (t.init(key, x, True) for t in (whole, parts))
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

    block = HaikuBlock(_perturb(params, param), _perturb(state, stat), whole, parts)
    return Case(recipe, dtype, mode, nn.Identity(), nn.Identity(), inputs, handle=block)


def validate_jax(recipe: JaxRecipe, dtype: str = "float32", seed: int = 0) -> None:
    """Refuse a recipe whose ``zero`` names a parameter the block lacks, with one line."""
    with precision(dtype):
        case = make_case(recipe, dtype, "eval", Draw(1, 1, seed, 0, 0))
    params = case.handle.params
    prefix = f"{BLOCK}/~/"
    known = sorted(f"{m.removeprefix(prefix)}.{p}" for m in params for p in params[m])
    for name in recipe.sites[0].zero:
        mod, param = _key(name)
        if param not in params.get(mod, {}):
            raise UsageError(f"recipe {recipe.name!r}: site 0 names parameter {name!r}, which "
                             f"the block lacks (it has {', '.join(known)})")


class HaikuAdapter:
    """The block laws' questions, answered by a Haiku block (:class:`~.adapter.BlockAdapter`)."""

    library = "haiku"
    inapplicable = INAPPLICABLE

    @staticmethod
    def _block(case: Case) -> HaikuBlock:
        assert isinstance(case.handle, HaikuBlock), case.handle
        return case.handle

    def _act(self, case: Case, z: Any) -> Any:
        return _jax().nn.relu(z) if case.recipe.sites[0].activation == "relu" else z

    def _apply(self, case: Case, fn: Any, x: Any, params: Any = None) -> Any:
        block = self._block(case)
        return fn.apply(block.params if params is None else params, block.state, None, x,
                        case.mode == "train")[0]

    def observe(self, case: Case) -> Observed:
        x = _jnp(case.inputs.x)
        y = _torch(self._apply(case, self._block(case).whole, x))
        visible = y if case.recipe.sites[0].activation is None else None
        return Observed(case.inputs.x.clone(), y, (case.inputs.x.clone(),), (visible,), (y,))

    def parts(self, case: Case, i: int, s: torch.Tensor
              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        skip, f = self._apply(case, self._block(case).parts, _jnp(s))
        return _torch(skip), [_torch(f)]

    def shortcut(self, case: Case, i: int, s: torch.Tensor) -> torch.Tensor:
        return self.parts(case, i, s)[0]

    def compose(self, case: Case, i: int, skip: torch.Tensor, update: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        alpha = case.recipe.sites[0].alpha
        s, f = _jnp(skip), _jnp(update)
        z = s + f if alpha == 1.0 else s + alpha * f
        return _torch(z), _torch(self._act(case, z))

    def post(self, case: Case, i: int, z: torch.Tensor) -> torch.Tensor:
        return _torch(self._act(case, _jnp(z)))

    def beta(self, case: Case, i: int) -> torch.Tensor | float:
        return 1.0

    def zeroed(self, case: Case, names: Sequence[str]) -> Case:
        block = self._block(case)
        ends = {_key(n) for n in names}
        params = _perturb(block.params, lambda mod, name, v: v * 0 if (mod, name) in ends
                          else v)
        return replace(case, handle=replace(block, params=params))

    def _cotangent(self, case: Case, y: Any) -> Any:
        """ȳ for output ``y``, drawn in the stream dtype (a wider output gets the same
        values), in ``y``'s dtype."""
        stream = TORCH_DTYPES[case.recipe.stream_dtype or case.dtype]
        return _jnp(case.inputs.cotangent(_torch(y).to(stream))).astype(y.dtype)

    def vjp(self, case: Case, params: bool = False) -> BlockVjp:
        jax, block = _jax(), self._block(case)

        def run(p: Any, x: Any) -> Any:
            return self._apply(case, block.whole, x, p)

        x = _jnp(case.inputs.x)
        if not params:
            y, back = jax.vjp(lambda x: run(block.params, x), x)
            y_bar = self._cotangent(case, y)
            return BlockVjp(_torch(y), _torch(y_bar), _torch(back(y_bar)[0]), [])
        y, back = jax.vjp(run, block.params, x)
        y_bar = self._cotangent(case, y)
        p_bar, x_bar = back(y_bar)
        grads = [(f"{mod.removeprefix(f'{BLOCK}/~/')}.{name}", _torch(g))
                 for mod, leaves in p_bar.items() for name, g in leaves.items()]
        return BlockVjp(_torch(y), _torch(y_bar), _torch(x_bar), grads)

    def site_vjp(self, case: Case, i: int, s: torch.Tensor, g: torch.Tensor
                 ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        jax, block = _jax(), self._block(case)

        def piece(j: int) -> Callable[[Any], Any]:
            return lambda x: self._apply(case, block.parts, x)[j]

        def composed(x: Any) -> Any:
            skip, f = self._apply(case, block.parts, x)
            return self._act(case, skip + f)

        x, y_bar = _jnp(s), _jnp(g)
        out, composed_back = jax.vjp(composed, x)
        whole = composed_back(y_bar.astype(out.dtype))[0]
        z, act_back = jax.vjp(lambda z: self._act(case, z),
                              sum(self._apply(case, block.parts, x)))
        z_bar = act_back(y_bar.astype(z.dtype))[0]
        parts = [jax.vjp(piece(j), x)[1](z_bar)[0] for j in (0, 1)]
        return _torch(whole), [_torch(p) for p in parts]

    def zero_map_vjp(self, case: Case, seen: Observed | None, y_bar: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        jax, block = _jax(), self._block(case)

        def zero_map(x: Any) -> Any:
            return self._act(case, self._apply(case, block.parts, x)[0])

        e, back = jax.vjp(zero_map, _jnp(case.inputs.x))
        return _torch(e), _torch(back(_jnp(y_bar).astype(e.dtype))[0])

    def value(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(torch.float64)

    def validate(self, recipe: Recipe, dtype: str, seed: int) -> Any:
        assert isinstance(recipe, JaxRecipe)
        validate_jax(recipe, dtype, seed)
        return None

    def case(self, recipe: Recipe, dtype: str, mode: str, draw: Draw,
             paths: tuple[str, ...] = ()) -> Case:
        assert isinstance(recipe, JaxRecipe)
        return make_case(recipe, dtype, mode, draw)

    def judging(self, dtype: str) -> contextlib.AbstractContextManager[None]:
        return precision(dtype)

    def raised(self, case: Case, exc: Exception) -> str | None:
        if isinstance(exc, PropertyFailure | Unjudged) or \
                not isinstance(exc, TypeError | ValueError):  # a shape, a dtype
            return None
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"the block raised {type(exc).__name__}: {first}, expected a result"


HAIKU = HaikuAdapter()
"""The adapter of every Haiku block."""
