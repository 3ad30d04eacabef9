"""The catalog of deliberately broken backends: each plants one autograd bug in one base.

A conformance suite earns trust by the bugs it catches. Each mutant here is the
reference backend with ONE bug seen in real engines (a broadcasting merge, an overwritten
gradient, a float32 α, a TF32 matmul past some width, an in-place relu, ...), grouped by
class (:data:`tests.mutants.base.CLASSES`); several hide, wrong only beyond some
size or depth, at the third use, or on one call in several; the forward-mode class plants
its bugs in the output tangent ``J·t`` alone (the gradients stay right).
``tools/mutants.py`` (``make mutants``) runs the property suite against every one and
reports which property killed it, after how many examples; a survivor is a gap in the
suite. Beside the scored mutants sit the foils (:mod:`tests.mutants.foils`,
``foils_forward``, ``foils_norm``): bugs placed where exactly one law looks, so that every
law of the suite has a backend it must kill. Every entry, scored or foil, says which laws
must kill it (``kills``, :class:`~tests.mutants.base.Kill`); the meta-tests
(``tests/meta/``) read their catch tables from :data:`KILLS`, and their "every law has a
foil" test reads it too. The catalog measures resverify itself, so it lives with the tests
and is not installed.

Every mutant is an ordinary backend, so one can be checked alone, from the repository
root::

    resverify check --backend tests.mutants:AlphaSquared

Public API: :data:`CATALOG` (the scored mutants, in table order), :data:`FOILS`,
:data:`ENTRIES` (both), :data:`KILLS` (every declared kill), :func:`by_name`, :func:`bug`
and the classes themselves.
"""

from __future__ import annotations

from resverify.spec.errors import UsageError
from tests.mutants.base import CLASSES, Kill, Mutant
from tests.mutants.faults import (
    CrashOnWideLinear,
    MismatchAsBackendError,
    RaisesOnMismatch,
    ScaleIgnoredPastDepth8,
    StaleBranchPastDepth4,
    SwappedMismatchShapes,
    UnsupportedForEmpty,
)
from tests.mutants.foils import (
    SUBSET_OPS,
    CorrelatedUpdates,
    Float32InFloat64,
    Float64Subset,
    IgnoresScale,
    MutatingMerge,
    MutatingReject,
    Nondeterministic,
    OverwrittenGrads,
    SharedWeightGrads,
    SkipZeroBranch,
    StaleBufferAfterRefusal,
    StrictAdd,
    UntransposedLinear,
    WidePrecisionSwitch,
    WrongAxisUnbroadcast,
    WrongDtype,
)
from tests.mutants.foils_forward import (
    DedupedOperandTangent,
    ReluOfTangent,
    TangentPooledByShape,
)
from tests.mutants.foils_norm import (
    DetachedNormStatistics,
    DetachedProjection,
    EpsOutsideSqrt,
    IdentityCarriesNorm,
    NoMeanInBackward,
    NormTwice,
    OnePassVariance,
    PostAsPre,
    SkippedNorm,
    UncentredLayerNorm,
)
from tests.mutants.forward import (
    NormTangentStatisticsDetached,
    ReluTangentOneAtZero,
    TangentDropsIdentity,
    TangentForgetsAlpha,
    TangentInFloat32,
    TangentMergedInPlace,
    TangentOfWeightsIgnored,
    TangentTf32AboveWidth32,
    TangentThroughTransposedWeight,
    TanhTangentFromInput,
)
from tests.mutants.graph import (
    BroadcastingMerge,
    CotangentScaledInPlace,
    DedupedRepeatedOperand,
    DetachedIdentityPastDepth4,
    DoubledIdentityGrad,
    DroppedIdentityGrad,
    FusedScaleOnIdentityGrad,
    GradsNotZeroed,
    InplaceRelu,
    LastBitEveryThirdCall,
    OverwriteAtThirdUse,
    ReshapingMerge,
    RunningTotalPropagated,
    SharedTanhBuffer,
    SqueezingMerge,
    StickyFallbackAfterRefusal,
    TransposingMerge,
)
from tests.mutants.numeric import (
    AccumulatesInFloat32,
    AlphaRoundedViaFloat32,
    AlphaSignLost,
    AlphaSquared,
    FalsyAlpha,
    GradsThroughFloat16,
    LeakyRelu,
    LinearFirstAxisRows,
    LinearWeightGradReshaped,
    MulProductOfSums,
    OutputUpcast,
    ReluGradOneAtZero,
    ReluGradThreshold,
    ReshapedWeightTranspose,
    ScalarOperandGradRank1,
    ScaleBackwardForgetsAlpha,
    SumEmptyIsNan,
    SumInFloat32Above64,
    SumKeepsRank1,
    TanhDerivFromInput,
    TanhInFloat32,
    Tf32AboveWidth32,
    UnbroadcastSlicesSizeOneAxes,
)

_ALL: tuple[type[Mutant], ...] = (
    BroadcastingMerge, ReshapingMerge, SqueezingMerge, TransposingMerge,
    OverwriteAtThirdUse, DedupedRepeatedOperand, RunningTotalPropagated,
    DroppedIdentityGrad, DoubledIdentityGrad, FusedScaleOnIdentityGrad,
    DetachedIdentityPastDepth4,
    AlphaSquared, AlphaRoundedViaFloat32, AlphaSignLost, FalsyAlpha, ScaleBackwardForgetsAlpha,
    ReshapedWeightTranspose, LinearWeightGradReshaped, LinearFirstAxisRows, Tf32AboveWidth32,
    ReluGradOneAtZero, ReluGradThreshold, LeakyRelu, TanhDerivFromInput,
    SumKeepsRank1, SumEmptyIsNan, SumInFloat32Above64, UnbroadcastSlicesSizeOneAxes,
    MulProductOfSums,
    ScalarOperandGradRank1,
    OutputUpcast, GradsThroughFloat16, AccumulatesInFloat32, TanhInFloat32,
    GradsNotZeroed, InplaceRelu, CotangentScaledInPlace, SharedTanhBuffer,
    StickyFallbackAfterRefusal, LastBitEveryThirdCall,
    MismatchAsBackendError, SwappedMismatchShapes, RaisesOnMismatch, UnsupportedForEmpty,
    CrashOnWideLinear,
    StaleBranchPastDepth4, ScaleIgnoredPastDepth8,
    TangentDropsIdentity, TangentForgetsAlpha, TangentThroughTransposedWeight,
    TangentTf32AboveWidth32,
    TangentOfWeightsIgnored, ReluTangentOneAtZero, TanhTangentFromInput, TangentInFloat32,
    NormTangentStatisticsDetached, TangentMergedInPlace,
)
CATALOG: tuple[type[Mutant], ...] = tuple(
    sorted(_ALL, key=lambda m: CLASSES.index(m.bug_class)))
"""Every scored mutant class (``make mutants``), grouped by bug class in the order of
``CLASSES``."""

FOILS: tuple[type[Mutant], ...] = (
    CorrelatedUpdates, Float32InFloat64, IgnoresScale, MutatingMerge, MutatingReject,
    Nondeterministic, OverwrittenGrads, SharedWeightGrads, SkipZeroBranch,
    StaleBufferAfterRefusal, StrictAdd, UntransposedLinear, WidePrecisionSwitch,
    WrongAxisUnbroadcast, WrongDtype,
    DedupedOperandTangent, ReluOfTangent, TangentPooledByShape,
    DetachedNormStatistics, DetachedProjection, EpsOutsideSqrt, IdentityCarriesNorm,
    NoMeanInBackward, NormTwice, OnePassVariance, PostAsPre, SkippedNorm, UncentredLayerNorm,
)
"""The foils: each pins the laws it declares, and ``make mutants`` does not score it
(:class:`Float64Subset`, a correct control, is in neither tuple)."""

ENTRIES: tuple[type[Mutant], ...] = (*CATALOG, *FOILS)
"""The whole catalog: the scored mutants, then the foils."""



def kills_of(entries: tuple[type[Mutant], ...]) -> tuple[tuple[Kill, type[Mutant]], ...]:
    """Every kill each of ``entries`` declares itself, with the entry: a subclass inherits
    none of its parent's (a foil built on another entry must name its own killers)."""
    return tuple((kill, entry) for entry in entries for kill in vars(entry).get("kills", ()))


KILLS: tuple[tuple[Kill, type[Mutant]], ...] = kills_of(ENTRIES)
"""Every declared kill of the catalog, with its entry: the meta-tests' catch tables."""

__all__ = ["CATALOG", "CLASSES", "ENTRIES", "FOILS", "KILLS", "SUBSET_OPS", "Float64Subset",
           "Kill", "Mutant", "bug", "by_name", "kills_of", *(m.__name__ for m in ENTRIES)]


def bug(mutant: type[Mutant]) -> str:
    """The one-line description of the mutant's bug (its docstring, joined to one line)."""
    return " ".join((mutant.__doc__ or "").split())


def by_name(names: list[str]) -> list[type[Mutant]]:
    """The entries named (class name or ``name``; a scored mutant or a foil), in catalog
    order; UsageError for an unknown one."""
    known = {m.__name__: m for m in ENTRIES} | {m.name: m for m in ENTRIES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown mutant(s) {unknown}; "
                         "`python tools/mutants.py --list` lists them")
    chosen = {known[n] for n in names}
    return [m for m in ENTRIES if m in chosen]
