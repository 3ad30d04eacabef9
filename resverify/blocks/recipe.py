"""Block recipes: what a shipped residual module declares about itself, as data.

Why data and not code: the laws of :mod:`resverify.blocks.laws` hold for *every* residual
block, so what differs between ``nn.TransformerEncoderLayer``, a Hugging Face decoder layer
and a ResNet block is only *where* its parts live. A recipe names those parts; the laws
read them; a later step reads the same names to trace the block into the exact IR (every
parameter an input, every random mask lifted to an input). A recipe never downloads
weights: its factory builds the module from a tiny config.

The API, for whoever writes catalog entries (``resverify/blocks/catalog/*.py``)::

    Recipe(
        name="torch.TransformerEncoderLayer(pre)",       # unique, shown in every message
        factory=lambda dtype: nn.TransformerEncoderLayer(16, 2, 32, 0.0, batch_first=True,
                                                         norm_first=True, dtype=dtype),
        sites=(Site(...), Site(...)),                    # the residual sites, in order
        shape=("batch", "seq", 16),                      # the input x; the two words are drawn
        dtypes=("float64", "float32", "bfloat16", "float16"),  # the dtypes the block claims
        stream_dtype=None,                               # None: the stream is in the dtype checked
        context={"memory": ("batch", "seq", 16)},        # extra inputs (drawn like x), optional
        call=None,                                       # None: module(x, **context)
        modes=("eval", "train"),
        zero_init=None,                                  # the factory with the library's own
                                                         # zero-init option, if it has one
        findings={},                                     # law -> Finding: a documented failure
        library=None,                                    # the block's distribution; None: read
                                                         # off the factory or the block's class
    )

``factory(dtype)`` returns the module with its parameters in ``dtype`` (a block with a
float32 stream and bfloat16 branches builds exactly that for ``dtype="bfloat16"`` and
declares ``stream_dtype="float32"``); the caller seeds torch's generator before calling it.
``call(module, x, context)`` runs the block and returns the output stream as one tensor
(unwrap a tuple there). ``zero_init(dtype)``, when the library has a
zero-init option (torchvision's ``zero_init_residual``), builds the block with it; the
zero-branch law requires that block to be exactly the zero-branch map, as built.

``findings`` maps a law to the :class:`Finding` that documents why it fails on this block (a
library's own choice, written up in ``docs/findings/``): ``resverify blocks`` reports such a
failure as ``expected`` and a pass of it as ``fixed`` (the finding no longer holds), and the
catalog's tests hold it as a strict xfail; both read this one declaration.

``library`` names the distribution the block comes from (``"x-transformers"``), whose
installed version the report shows; None lets ``resverify blocks check`` read it off the
factory (a ``functools.partial`` unwrapped) or, where that is the recipe's own module, the
built block's class (:func:`resverify.blocks.library.library_of`).

One :class:`Site` per residual sum, in the order the block computes them. The stream
entering site ``i`` is ``s``; the site computes ``z = (β·shortcut(s) + alpha * D(F(s))) / c``
(β and c are 1 unless declared) and its exit ``post(act(z))``, where

- ``branch`` is F, evaluated alone through the module's own submodules: either a callable
  ``branch(module, s, context) -> tensor`` or a tuple of submodule names applied in order.
  It returns the update *before* drop path (``D``, which the laws lift: they read the
  realised mask off the drop-path submodules) and *after* any LayerScale γ;
- ``zero`` names the parameters whose zeroing makes F ≡ 0 (the branch's last layer);
- ``scale`` names the LayerScale γ (or α) parameter inside F, None if there is none, and
  ``scale_init`` the value the factory gave the constructor for it; ``scale_axis`` says
  which dimension of the update a one-dimensional γ runs along: None (the default) means
  the last, as a channels-last LayerScale ``x * gamma`` broadcasts; a block that scales the
  channels of an ``(N, C, H, W)`` map (ConvNeXt's ``gamma.reshape(1, -1, 1, 1)``) says 1.
  The affine-in-γ law never guesses the dimension from sizes: a γ whose length is not the
  update's size along that dimension is refused, naming ``scale_axis``. A γ of any other
  shape broadcasts as torch broadcasts it (``scale_axis`` must then be None). A gate
  ``x + g·F`` is such a scale; ``scale_fn="tanh"`` declares a tanh gate ``x + tanh(g)·F``
  (torchtune's ``TanhGate``), whose ``scale`` is g and ``scale_init`` g's initial value;
- ``norm`` is the placement, ``"pre"`` (``norms[0]`` reads ``s`` inside F), ``"post"``
  (``norms`` are applied to ``z`` in order: ``post``) or ``"none"``;
- ``reads`` says what a pre-norm's ``norms[0]`` reads: ``"stream"`` (``s`` itself) or
  ``"cast"`` (``s`` cast to another dtype, ``norm(s.to(bf16))``, as a float32 stream with
  half-precision sublayers is read: the stream observed is then the tensor the cast read);
- ``drop_path`` names the drop-path / stochastic-depth submodules of the site, whose drop
  probability is the attribute ``drop_prob_attr`` (``drop_prob`` in timm, ``p`` in
  torchvision);
- ``shortcut`` is ``"identity"`` or the name of the projection submodule;
- ``activation`` names an activation applied after the sum (``"relu"``: ResNet), or None;
- ``alpha`` is the constant the block multiplies F by (1 for all shipped blocks here);
- ``parallel`` names further branches reading the same stream ``s`` and added into the same
  sum (GPT-J/NeoX's ``x + attn(n1(x)) + mlp(n2(x))``): F is ``branch + parallel[0] + ...``,
  each evaluated alone like ``branch``, and the laws take each term's magnitude into the
  budget of the sum (``zero`` then names the last layer of every branch);
- ``skip_scale`` is β in ``β·shortcut(s) + alpha·F``: a constant (DeepNet's α), or the
  name of a parameter (x-transformers' ``scale_residual``), broadcast as torch does;
- ``post_scale`` is c in ``(β·shortcut(s) + alpha·F) / c`` (diffusers'
  ``output_scale_factor``), and ``post_factor`` m in ``(β·shortcut(s) + alpha·F) · m``, for
  a block that multiplies its sum instead (EDM's ``x * skip_scale`` with ``skip_scale =
  sqrt(0.5)``: m is the float the block multiplies by, not a divisor rounded another way);
  a site declares at most one of the two;
- ``exact`` says the block computes the sum as the recipe composes it,
  ``(β·shortcut(s) + alpha·F) / c`` op for op (then the site is judged bitwise); False
  judges the sum and the exit within the rounding budget of that computation evaluated in
  any order, a product or quotient by a power of two counting as exact
  (:func:`~resverify.blocks.laws_forward.sum_budget`).

The laws observe the stream between sites with forward hooks: site 0 enters with the
block's input (which a pre-norm site 0's ``norms[0]`` must read, else the recipe names the
wrong norm), a later pre-norm site with what its ``norms[0]`` reads, and a site after a
post-norm site with what that site's last norm returns (docs/blocks.md, "Where the stream
between sites is observed"). :func:`validate` refuses a recipe
whose later site cannot be observed that way, and any name the module lacks, with one line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

from resverify.spec.errors import UsageError

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["Recipe", "Site", "describe", "validate"]

DTYPES = ("float64", "float32", "bfloat16", "float16")
"""The dtypes a block may claim, widest first."""
MODES = ("eval", "train")
NORMS = ("pre", "post", "none")
READS = ("stream", "cast")
"""What a pre-norm site's ``norms[0]`` reads: the stream itself, or the stream cast to
another dtype (``norm(s.to(bf16))``), whose source tensor is then the stream."""
GATES = ("tanh",)
"""Gates a site's ``scale`` may pass through (``scale_fn``): ``x + tanh(g)·F``."""
ACTIVATIONS = ("relu",)
"""Activations a site may apply after its sum (evaluated with ``torch.relu``)."""

Branch: TypeAlias = "Callable[[nn.Module, torch.Tensor, Mapping[str, torch.Tensor]], torch.Tensor] | tuple[str, ...]"  # noqa: E501
Dims: TypeAlias = tuple[int | str, ...]


def _choose(value: str | None, known: tuple[str, ...], what: str) -> None:
    if value is not None and value not in known:
        raise UsageError(f"{what} {value!r} is not one of {list(known)}")


@dataclass(frozen=True)
class Site:
    """One residual sum of a block: ``exit = post(act(shortcut(s) + alpha * D(F(s))))``."""

    label: str
    branch: Branch
    zero: tuple[str, ...]
    norm: str = "pre"
    norms: tuple[str, ...] = ()
    scale: str | None = None
    scale_init: float | None = None
    scale_axis: int | None = None
    scale_fn: str | None = None
    drop_path: tuple[str, ...] = ()
    drop_prob_attr: str = "drop_prob"
    shortcut: str = "identity"
    activation: str | None = None
    alpha: float = 1.0
    exact: bool = True
    parallel: tuple[Branch, ...] = ()
    skip_scale: float | str = 1.0
    post_scale: float = 1.0
    post_factor: float = 1.0
    reads: str = "stream"

    def __post_init__(self) -> None:
        _choose(self.norm, NORMS, f"site {self.label!r}: norm placement")
        _choose(self.activation, ACTIVATIONS, f"site {self.label!r}: activation")
        if not self.zero:
            raise UsageError(f"site {self.label!r}: zero names no parameter; name the "
                             "parameters whose zeroing makes the branch 0")
        if self.norm != "none" and not self.norms:
            raise UsageError(f"site {self.label!r}: a {self.norm}-norm site names no norm "
                             "submodule (norms=...)")
        if self.scale_init is not None and self.scale is None:
            raise UsageError(f"site {self.label!r}: scale_init without scale")
        if self.scale_axis is not None and self.scale is None:
            raise UsageError(f"site {self.label!r}: scale_axis without scale")
        _choose(self.scale_fn, GATES, f"site {self.label!r}: scale_fn")
        _choose(self.reads, READS, f"site {self.label!r}: reads")
        if self.reads == "cast" and self.norm != "pre":
            raise UsageError(f"site {self.label!r}: reads='cast' is where a pre-norm reads "
                             "the stream; this site's norm is " + repr(self.norm))
        if self.scale_fn is not None and self.scale is None:
            raise UsageError(f"site {self.label!r}: scale_fn without scale (name the gate's "
                             "parameter in scale=...)")
        for what, value in (("alpha", self.alpha), ("post_scale", self.post_scale),
                            ("post_factor", self.post_factor),
                            *((("skip_scale", self.skip_scale),)
                              if not isinstance(self.skip_scale, str) else ())):
            if not (isinstance(value, int | float) and math.isfinite(value) and value != 0):
                raise UsageError(f"site {self.label!r}: {what} {value!r} is not a finite "
                                 "nonzero number")
        if self.post_scale != 1.0 and self.post_factor != 1.0:
            raise UsageError(f"site {self.label!r}: post_scale divides the sum and post_factor "
                             "multiplies it; declare the one the block computes")
        if isinstance(self.parallel, str) or any(isinstance(b, str) for b in self.parallel):
            raise UsageError(f"site {self.label!r}: parallel must be a tuple of branches (each "
                             "a callable or a tuple of submodule names), not names")

    @property
    def scaled(self) -> bool:
        """Whether the site scales its skip or its sum (a skip scale, a post-scale or
        factor): its zero-branch map is then not the bare shortcut."""
        return self.skip_scale != 1.0 or self.post_scale != 1.0 or self.post_factor != 1.0

    def evaluate(self, module: nn.Module, s: torch.Tensor,
                 context: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """F(s) through the module's own submodules (before drop path): the branch, plus each
        parallel branch, added left to right."""
        terms = self.terms(module, s, context)
        out = terms[0]
        for term in terms[1:]:
            out = out + term
        return out

    def terms(self, module: nn.Module, s: torch.Tensor,
              context: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        """Each branch's value on ``s``: ``branch`` first, then the ``parallel`` ones."""
        return [apply_branch(b, module, s, context) for b in (self.branch, *self.parallel)]

    def names(self) -> list[tuple[str, str]]:
        """Every ``(kind, name)`` the site refers to, kind ``parameter`` or ``submodule``."""
        params = [*self.zero, *([self.scale] if self.scale else []),
                  *([self.skip_scale] if isinstance(self.skip_scale, str) else [])]
        subs = [*self.norms, *self.drop_path,
                *([self.shortcut] if self.shortcut != "identity" else []),
                *(n for b in (self.branch, *self.parallel) if isinstance(b, tuple) for n in b)]
        return [("parameter", p) for p in params] + [("submodule", s) for s in subs]


def apply_branch(branch: Branch, module: nn.Module, s: torch.Tensor,
                 context: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """One branch's value on ``s``: the callable, or the named submodules in order."""
    if callable(branch):
        return branch(module, s, context)
    out = s
    for name in branch:
        out = module.get_submodule(name)(out)
    return out


@dataclass(frozen=True)
class Finding:
    """Why a law fails on a block, as documented: a one-line ``reason``, the ``doc`` anchor
    that writes it up (``docs/findings/blocks-notes.md#...``) and the failure ``kind`` it
    expects (a crash is never hidden by a documented wrong value)."""

    reason: str
    doc: str
    kind: str = "law"

    def __post_init__(self) -> None:
        if not self.reason or "\n" in self.reason:
            raise UsageError(f"finding {self.doc!r}: the reason must be one non-empty line")
        if "#" not in self.doc:
            raise UsageError(f"finding {self.reason!r}: doc {self.doc!r} names no anchor "
                             "(file.md#heading)")


@dataclass(frozen=True)
class Recipe:
    """A block: how to build it, how to call it, which dtypes it claims, its sites in order."""

    name: str
    factory: Callable[[torch.dtype], nn.Module]
    sites: tuple[Site, ...]
    shape: Dims = ("batch", "seq", 16)
    dtypes: tuple[str, ...] = DTYPES
    stream_dtype: str | None = None
    context: Mapping[str, Dims] = field(default_factory=dict)
    call: Callable[[nn.Module, torch.Tensor, Mapping[str, torch.Tensor]], torch.Tensor] | None \
        = None
    modes: tuple[str, ...] = MODES
    zero_init: Callable[[torch.dtype], nn.Module] | None = None
    notes: str = ""
    findings: Mapping[str, Finding] = field(default_factory=dict)
    library: str | None = None

    def __post_init__(self) -> None:
        where = f"recipe {self.name!r}"
        if not self.sites:
            raise UsageError(f"{where}: no residual site")
        for dtype in (*self.dtypes, *([self.stream_dtype] if self.stream_dtype else [])):
            _choose(dtype, DTYPES, f"{where}: dtype")
        for mode in self.modes:
            _choose(mode, MODES, f"{where}: mode")
        for dims in (self.shape, *self.context.values()):
            bad = [d for d in dims if not (isinstance(d, int) and d > 0)
                   and d not in ("batch", "seq")]
            if bad or not dims or dims[0] != "batch":
                raise UsageError(f"{where}: shape {list(dims)} must start with 'batch' and hold "
                                 "positive sizes or 'seq'")

    adapter: ClassVar[str] = "torch"
    """The block adapter that answers the laws for this recipe's block, by its library
    (:data:`resverify.blocks.adapters.ADAPTERS`): a torch module's, ``"torch"``; a recipe of
    another library names its own."""

    def run(self, module: nn.Module, x: torch.Tensor,
            context: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The block's output stream for input ``x``."""
        if self.call is not None:
            return self.call(module, x, context)
        out = module(x, **context)
        if not _is_tensor(out):
            raise UsageError(f"recipe {self.name!r}: the module returned "
                             f"{type(out).__name__}, not a tensor; give the recipe a call= "
                             "that returns the output stream")
        return out  # type: ignore[no-any-return,unused-ignore]


def maker(recipe: Recipe) -> Any:
    """What builds the block: a JAX recipe's ``block``, else the factory, a
    ``functools.partial`` unwrapped to the function or class it calls."""
    import functools

    made: Any = getattr(recipe, "block", None) or recipe.factory
    while isinstance(made, functools.partial):
        made = made.func
    return made


def describe(recipe: Recipe) -> list[str]:
    """What a recipe declares, one line per site after a header, for a listing::

        torch.TransformerEncoderLayer(pre): input [batch, seq, 16], dtypes float64 ...
          site 0 self-attention: pre-norm norm1; zero self_attn.out_proj.weight, ...
    """
    stream = f", stream {recipe.stream_dtype}" if recipe.stream_dtype else ""
    extra = "".join(f", {k} {list(v)}" for k, v in recipe.context.items())
    lines = [f"{recipe.name}: input {list(recipe.shape)}{extra}, dtypes "
             f"{' '.join(recipe.dtypes)}{stream}, modes {' '.join(recipe.modes)}"]
    for i, site in enumerate(recipe.sites):
        lines.append(f"  site {i} {site.label}: {'; '.join(_declared(site))}")
    return lines


def _declared(site: Site) -> list[str]:
    """What a site declares, in words, one part each."""
    parts = [f"{site.norm}-norm {' '.join(site.norms)}" if site.norm != "none" else
             "no norm", f"zero {', '.join(site.zero)}"]
    if site.scale and site.scale_fn:
        parts.append(f"gate {site.scale_fn}({site.scale})"
                     + (f" = {site.scale_fn}({site.scale_init!r})"
                        if site.scale_init is not None else ""))
    elif site.scale:
        parts.append(f"LayerScale {site.scale}"
                     + (f" = {site.scale_init!r}" if site.scale_init is not None else "")
                     + (f" along dim {site.scale_axis}" if site.scale_axis is not None
                        else ""))
    if site.drop_path:
        parts.append(f"drop path {', '.join(site.drop_path)}")
    if site.reads == "cast":
        parts.append("the norm reads the stream cast")
    if site.shortcut != "identity":
        parts.append(f"shortcut {site.shortcut}")
    if site.activation:
        parts.append(f"then {site.activation}")
    if site.parallel:
        parts.append(f"{1 + len(site.parallel)} parallel branches")
    parts += _scales(site)
    if not site.exact:
        parts.append("judged within the merge budget")
    return parts


def _scales(site: Site) -> list[str]:
    """The constants and scales a site declares, in words."""
    said = [(site.alpha, "alpha"), (site.skip_scale, "skip scale"),
            (site.post_scale, "sum divided by"), (site.post_factor, "sum multiplied by")]
    return [f"{words} {value!r}" for value, words in said if value != 1.0]


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _missing(module: nn.Module, kind: str, name: str) -> bool:
    if kind == "parameter":
        return name not in dict(module.named_parameters())
    try:
        module.get_submodule(name)
    except AttributeError:
        return True
    return False


def _observable(recipe: Recipe, index: int) -> bool:
    """Whether the stream entering site ``index`` can be read off a hook (see module doc)."""
    return index == 0 or recipe.sites[index].norm == "pre" or \
        recipe.sites[index - 1].norm == "post"


def validate(recipe: Recipe, module: nn.Module) -> None:
    """Refuse a recipe that names what ``module`` lacks, with one line naming it.

    >>> validate(recipe, module)  # doctest: +SKIP
    UsageError: recipe 'torch.TransformerEncoderLayer(pre)': site 1 names parameter
    'linear3.weight', which the module lacks
    """
    where = f"recipe {recipe.name!r}"
    for i, site in enumerate(recipe.sites):
        for kind, name in site.names():
            if _missing(module, kind, name):
                raise UsageError(f"{where}: site {i} names {kind} {name!r}, which the module "
                                 "lacks")
        for name in site.drop_path:
            if not hasattr(module.get_submodule(name), site.drop_prob_attr):
                raise UsageError(f"{where}: site {i}'s drop-path submodule {name!r} has no "
                                 f"attribute {site.drop_prob_attr!r} (drop_prob_attr=...)")
        if not _observable(recipe, i):
            raise UsageError(f"{where}: site {i} ({site.label}) has no pre-norm and follows a "
                             "site without a post-norm, so the stream entering it cannot be "
                             "observed; split the block into recipes of one site each")
