"""A portable corpus: the suite's pinned cases as requests with their exact answers.

Why: an engine that cannot run Python (Rust, C++, Julia, a GPU kernel's test harness)
still needs the test cases with their exact expected results and the budget each element
may miss by. ``resverify vectors export DIR`` writes them; the engine's own test suite reads
JSON, computes, and compares (``docs/vectors.md``); ``resverify vectors run DIR --backend
B`` does the same for any backend resverify can drive, without Hypothesis.

What goes in: every request the property suite's laws send for each pinned example of
every property test (``@example``, across the four dtypes) -- recorded by running the law
on :class:`Oracle`, a backend that answers the exact specification rounded to the dtype --,
each op alone on its sample shapes (family ``ops``; in forward mode too, family
``ops_jvp``, once the spec computes tangents), and every seed fixture of
:func:`resverify.spec.fixtures.seed_cases`, each in every dtype. Each
entry holds the request, and either the exact output and gradients (rationals as text,
``"-13/4"``) with a per-element budget (hex floats; ``"inf"`` where the analysis allows
overflow) -- and the exact output tangent with its budget when the request carries
tangents (forward mode) -- or the typed error the spec gives. A law that relates several
answers also writes, per pinned example and dtype, a *group*: the one the law itself built
and drove on the oracle (:func:`resverify.properties.relations.recording`), its requests and
the relation with its exact bound. The pinned examples are the declared list
:data:`resverify.properties.pinned.PINNED`, which the tests' ``@example`` fill. The budget is
:func:`resverify.spec.budget.error_budget`'s, except where the property's law demands
exact equality (:data:`EXACT`): there it is 0 (still ``inf`` where the analysis allows
overflow). Where ``tanh``, ``sigmoid`` or a norm is involved the exact value is not
rational: the entry's exact values are the midpoints of enclosures of half-width
``enclosure`` (text), which the budget already includes.

A backend passes an entry (:func:`resverify.properties.judge.judge`) when it gives bitwise the
same answer twice, leaves its inputs untouched, and every element is within its budget
(:func:`resverify.spec.compare.within`), or it gives the expected error naming the expected
shapes -- each as far as the entry's ``checks`` ask; a refused merge under the law that a
refusal changes nothing also carries the law's ``probe``, a valid request that must give the
same bits before and after it (the check ``state``); a group
(:func:`resverify.properties.judge.judge_group`) when every answer is a value and every
relation holds.
"""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import hypothesis
import numpy as np
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from resverify.impl.backend import Backend, Capabilities
from resverify.properties import groups as group_files
from resverify.properties.groups import rational
from resverify.properties.judge import Expected, Judged, judge, judge_group
from resverify.properties.laws_variance import check_sample_variance_identity
from resverify.properties.relations import Group, digest, recording
from resverify.spec.budget import error_budget
from resverify.spec.codec import (
    packaged_schema,
    parse_json,
    request_from_dict,
    request_to_dict,
    round_to_dtype,
)
from resverify.spec.errors import InvalidProgram, ResverifyError, UsageError
from resverify.spec.exact import ExactResult, evaluate
from resverify.spec.ir import DTYPES
from resverify.spec.ops import OP_TABLE
from resverify.spec.request import Request, ResultError, Value, storage_dtype

__all__ = []

FORMAT = 1
MANIFEST = "manifest.json"
SCHEMA = "vectors.schema.json"
EXACT: Mapping[str, tuple[str, ...] | None] = {
    "shared_operand_receives_k_times_the_cotangent": None,
    "zero_branch_is_identity_and_still_learns": ("output", "x"),
    "branch_zero_at_one_input_still_passes_gradient": None,
    "alpha_zero_is_identity_and_branch_gets_no_gradient": None,
    "block_with_a_minus_one_cancels_gradient_exactly": ("output", "x"),
    "alpha_zero_passes_the_input_tangent_unchanged": ("tangent",),
    "shared_operand_tangent_is_k_times_the_input_tangent": ("tangent",),
}
"""Properties whose law demands exact equality, and the arrays it judges exactly
(``output`` and input names; None: all of them)."""
VALUE = ("form", "output", "grads")
TANGENT = ("form", "tangent")
LAW_CHECKS: Mapping[str, tuple[str, ...]] = {
    "same_request_gives_bitwise_identical_results": ("deterministic",),
    "backend_never_mutates_inputs": ("untouched",),
    "forward_mode_leaves_inputs_and_tangents_unchanged": ("untouched",),
    "pre_norm_gradient_keeps_the_identity_highway_at_every_depth": ("form", "grads"),
    "post_norm_gradient_passes_through_every_norm_at_every_depth": ("form", "grads"),
    "results_have_declared_shapes_and_dtype": ("form",),
    "stack_output_is_input_plus_sum_of_branches": ("form",),
    "output_and_gradients_are_affine_in_alpha": ("form",),
    "gradient_matches_central_differences": ("form", "grads"),
    "independent_updates_add_their_variances": ("form", "output"),
    "inverse_sqrt_depth_scaling_keeps_unit_variance": ("form", "output"),
    "branch_depending_on_input_breaks_naive_variance_sum": ("form", "output"),
    "pre_norm_stream_variance_grows_linearly_with_depth": ("form", "output"),
    "post_norm_block_keeps_stream_variance_constant_with_depth": ("form", "output"),
    "sample_variance_of_merge_is_sum_plus_twice_covariance": ("form",),
    "tangent_and_gradients_satisfy_duality": ("form",),
    "tangent_is_linear_in_the_input_tangents": ("form",),
}
"""The checks (:data:`resverify.properties.judge.CHECKS`) of each property's law on one
request; every other property checks a value (``VALUE``), a forward-mode property (marked
``jvp``) the output tangent (``TANGENT``: its laws read only the tangent). A law that
relates several answers (affinity in α, the unrolled sum, the sample variance identity,
the duality, linearity in t) asks each of its requests only for a value of the declared
form: its group checks the relation; the random-stream variance laws check each output.
A refused shape mismatch is checked with ``error``, ``shapes`` and ``untouched``, except
under the laws of :data:`REFUSED_CHECKS`."""
REFUSED_CHECKS: Mapping[str, tuple[str, ...]] = {
    "refusal_leaves_the_backend_state_unchanged": ("state",),
    "residual_add_rejects_every_shape_mismatch": ("error",),
    "residual_add_rejects_equal_size_shape_pairs": ("error",),
    "shape_mismatch_names_both_shapes_in_order": ("shapes",),
    "add_accepts_every_broadcastable_pair_residual_add_refuses": ("error",),
    "refused_merge_leaves_its_inputs_untouched": ("untouched",),
}
"""The checks of a refused merge under each law of the refusal that judges one: the suite
states the state, the rejection, the shapes it names and the untouched inputs as separate
laws, so an entry asks only for what its own law checks (every other refusal: ``error``,
``shapes`` and ``untouched``). The state law's entry carries the probe the law ran around
the refusal (``residual_add(a, a)``), so ``state`` compares the probe's answers before and
after it; the shapes law holds where no ``shape_mismatch`` comes (another law judges a
merge that answers a value), and so does ``shapes``."""
READS: Mapping[str, tuple[str, ...]] = {
    "pre_norm_gradient_keeps_the_identity_highway_at_every_depth": ("x",),
}
"""Properties whose law reads only some inputs' gradients: their entries expect only
those (its exact row sums of x̄ are not exported; the budget check of x̄ is)."""
FROM_ONE_REQUEST: Mapping[str, Callable[[Backend, Request], None]] = {
    "sample_variance_of_merge_is_sum_plus_twice_covariance": check_sample_variance_identity,
}
"""The properties whose law takes one request and sends the others itself (the sample
variance identity fetches the branch): the saved vector of a failure is enough to rebuild
its group (``resverify vectors group``)."""
Doc = dict[str, Any]
# the schema's element patterns (spec/schema/vectors.schema.json), applied by _arrays
_RATIONAL = re.compile(r"-?[0-9]+(/[1-9][0-9]*)?")
_BOUND = re.compile(r"inf|0x[0-9a-f]+(\.[0-9a-f]*)?p[+-]?[0-9]+")


class Oracle:
    """A backend that answers the exact specification, each element rounded once to the
    request's dtype: it claims every dtype and op, and breaks no law."""

    name = "oracle"

    def __init__(self) -> None:
        self.seen: dict[str, Request] = {}
        self.capabilities = Capabilities(DTYPES, tuple(OP_TABLE), "cpu", modes())

    def run(self, request: Request) -> Value | ResultError:
        self.seen.setdefault(digest(request), request)
        exact = evaluate(request)
        if exact.error is not None:
            return exact.error
        assert exact.output is not None and exact.grads is not None
        return Value(_rounded(exact.output, request.dtype),
                     {k: _rounded(v, request.dtype) for k, v in exact.grads.items()},
                     None if exact.tangent is None else _rounded(exact.tangent, request.dtype))


def modes() -> tuple[str, ...]:
    """The modes the exact specification answers (and budgets): both."""
    return ("vjp", "jvp")


def _rounded(values: np.ndarray, dtype: str) -> np.ndarray:
    flat = [round_to_dtype(Fraction(v), dtype) for v in np.asarray(values).reshape(-1).tolist()]
    return np.array(flat, dtype=np.float64).reshape(np.shape(values)).astype(
        storage_dtype(dtype))


# ----------------------------------------------------------------------------------------
# collecting the cases


@dataclass(frozen=True)
class CorpusGroup:
    """The requests a law relating several answers sent for one pinned example, with the
    relation (a group file of the corpus)."""

    property: str
    family: str
    source: str
    dtype: str
    group: Group


@dataclass(frozen=True)
class CorpusCase:
    """One request of the corpus and where it comes from."""

    property: str
    family: str
    source: str
    request: Request
    probe: Request | None = None
    """The valid request a mismatch law ran before and after this refused one, to see that
    the refusal changed nothing (the check ``state``)."""
    mode: str = "vjp"
    """``jvp`` when a forward-mode property (marked ``jvp``) sends the request."""


def families() -> list[str]:
    """The property families: one per ``test_*`` module of the suite (``oracle`` for
    ``properties/test_oracle.py``), so a new module of properties is exported at once."""
    from resverify import properties

    return sorted(m.name.removeprefix("test_") for m in pkgutil.iter_modules(properties.__path__)
                  if m.name.startswith("test_"))


def _property_tests() -> Iterator[tuple[str, str, Any]]:
    """(family, property name, test function) for every property test of the suite."""
    for family in families():
        module = importlib.import_module(f"resverify.properties.test_{family}")
        for name in sorted(vars(module)):
            test = getattr(module, name)
            if name.startswith("test_") and hypothesis.is_hypothesis_test(test):
                yield family, name.removeprefix("test_"), test


def property_mode(test: Any) -> str:
    """``jvp`` for a property test marked ``jvp`` (on itself or its module), else ``vjp``."""
    module = importlib.import_module(test.__module__)
    marks = [*getattr(test, "pytestmark", ()), *_marks(getattr(module, "pytestmark", ()))]
    return "jvp" if any(m.name == "jvp" for m in marks) else "vjp"


def _marks(marks: Any) -> list[Any]:
    return list(marks) if isinstance(marks, list | tuple) else [marks]


def _pinned_cases(family: str, prop: str, test: Any) -> Iterator[CorpusCase | CorpusGroup]:
    """The requests the law of ``test`` sends for each of its pinned examples
    (:func:`resverify.properties.pinned.pinned_examples`), per dtype, and every group a law
    relating several answers built on them."""
    from resverify.properties.pinned import pinned_examples
    from resverify.properties.plugin import PropertyRun
    from resverify.properties.strategies import SENSIBLE, claiming, drawing

    pinned = pinned_examples(test)
    for number, values in enumerate([] if pinned is None else pinned.examples, 1):
        assert pinned is not None
        for dtype in DTYPES:
            oracle = Oracle()
            run = PropertyRun(prop, oracle.name, oracle)
            with (claiming(oracle.capabilities.ops), drawing(dtype, SENSIBLE),
                  recording() as groups):
                explicit_example(pinned.body, values, backend=oracle, dtype=dtype, prop=run)
            source = f"example {number} of test_{prop}"
            yield from _law_cases(prop, family, source, list(oracle.seen.values()),
                                  property_mode(test))
            for group in groups:
                yield CorpusGroup(prop, family, source, dtype, group)


def _law_cases(prop: str, family: str, source: str, seen: list[Request],
               mode: str) -> Iterator[CorpusCase]:
    """The entries of the requests a law sent for one pinned example: a probe the law ran
    around a refused merge (:func:`_is_probe`) goes into the refused merge's entry, not
    into one of its own."""
    refusals = [r for r in seen if not r.shape_valid]
    probes = [r for r in seen if refusals and _is_probe(r)]
    for request in seen:
        if any(request is p for p in probes):
            continue
        probe = next((p for p in probes if not request.shape_valid and "a" in request.inputs
                      and np.array_equal(p.inputs["a"], request.inputs["a"])), None)
        yield CorpusCase(prop, family, source, request, probe, mode)


def _is_probe(request: Request) -> bool:
    """``residual_add(a, b)`` with ``b`` equal to ``a``: the probe of a mismatch law."""
    nodes, values = request.program.nodes, list(request.inputs.values())
    return ([n.op for n in nodes] == ["residual_add"] and len(values) == 2
            and np.array_equal(values[0], values[1]))


def explicit_example(body: Callable[..., Any], values: Mapping[str, Any],
                     **fixtures: Any) -> None:
    """Run ``body`` (a property test before ``@given``: ``Pinned.body``) on the explicit
    example ``values``, inside a Hypothesis run of that example alone (so ``assume``,
    ``reject`` and ``event`` in the law work as in the suite; an example the law rejects
    runs nothing)."""
    def single(**drawn: Any) -> None:
        body(**fixtures, **drawn)

    never = {name: st.just(value) for name, value in values.items()}  # never drawn
    run = example(**values)(given(**never)(single))
    settings(phases=[Phase.explicit], database=None, deadline=None)(run)()


def _fixture_cases() -> Iterator[CorpusCase]:
    """Every seed fixture (spec/fixtures.py) in every dtype; the spec must give the values
    the seeds state (checked here: a corpus never ships an answer the seeds contradict)."""
    from resverify.spec.fixtures import seed_cases

    for name, (request, output, grads) in seed_cases().items():
        exact = evaluate(request)
        assert exact.output is not None and exact.grads is not None
        found = (tuple(exact.output.reshape(-1).tolist()),
                 {k: tuple(exact.grads[k].reshape(-1).tolist()) for k in grads})
        if found != (output, grads):
            raise InvalidProgram(f"the spec disagrees with seed fixture {name}: {found}")
        for dtype in DTYPES:
            typed = Request(request.program, request.inputs, dtype, request.cotangent)
            yield CorpusCase("seed_fixture_" + name.split(".")[0], "fixtures", name, typed)


OP_ATTRIBUTES: Mapping[str, Fraction] = {"alpha": Fraction(3, 4), "eps": Fraction(1, 100)}


def _op_cases() -> Iterator[CorpusCase]:
    """Each op of :data:`resverify.spec.ops.OP_TABLE` alone on each of its sample shapes
    (values k/4, |k| <= 8, from a seeded generator; α = 3/4, ε = 1/100, a layout op's
    integer attributes from its sample), in every dtype:
    the entries that reach every op, tanh's enclosures included."""
    from resverify.spec.ir import Input, Node, Program
    from resverify.spec.ops.attributes import sample_params

    for name, op in OP_TABLE.items():
        attr = getattr(op, "attribute", "alpha" if name == "scale" else None)
        if attr is not None and attr not in OP_ATTRIBUTES:
            continue
        given = {attr: OP_ATTRIBUTES[attr]} if attr else {}
        for number, shapes in enumerate(op.samples, 1):
            rng = np.random.default_rng(number)
            names = "abc"[:len(shapes)]
            params = sample_params(shapes)  # a layout op's integer attributes
            node = Node("y", name, tuple(names), **given, params=params)
            program = Program(tuple(Input(n, s) for n, s in zip(names, shapes, strict=True)),
                              (node,), "y")
            values = dict(zip(names, op.draw(rng, shapes), strict=True))
            cot = rng.integers(-8, 9, size=op.shape(list(shapes), node.attribute)) / 4.0
            tangents = {n: rng.integers(-8, 9, size=s) / 4.0
                        for n, s in zip(names, shapes, strict=True)}
            where = f"{name} on sample shapes {[list(s) for s in shapes]}" + (
                f" with {params.text()}" if params else "")
            for dtype in DTYPES:
                if params.get("source", dtype) != dtype:  # a cast reads its source dtype
                    continue
                yield CorpusCase(f"op_{name}", "ops", where, Request(program, values, dtype, cot))
                if "jvp" in modes():
                    yield CorpusCase(f"jvp_op_{name}", "ops_jvp", f"{where}, forward mode",
                                     Request(program, values, dtype, cot, tangents))


def collect(select: Sequence[str] = (),
            progress: Callable[[str], None] = lambda _: None) -> list[CorpusCase | CorpusGroup]:
    """Every case of the corpus, each request once (the first property that sends it),
    and every group; with ``select``, only the properties (and seed fixtures) whose name
    contains one of its texts."""
    cases: dict[str, CorpusCase | CorpusGroup] = {}
    chosen = (lambda name: any(text in name for text in select)) if select else (
        lambda name: True)
    for family, prop, test in _property_tests():
        if not chosen(prop):
            continue
        progress(f"recording {prop}")
        for case in _pinned_cases(family, prop, test):
            requests = case.group.requests if isinstance(case, CorpusGroup) else [case.request]
            kind = "group" if isinstance(case, CorpusGroup) else "entry"
            cases.setdefault(f"{prop}:{kind}:{'+'.join(map(digest, requests))}", case)
    for case in filter(lambda c: chosen(c.property), _op_cases()):
        cases.setdefault(f"{case.property}:{digest(case.request)}", case)
    for case in filter(lambda c: chosen(c.property), _fixture_cases()):
        cases[f"{case.source}:{case.request.dtype}"] = case  # every fixture has its entries
    return list(cases.values())


# ----------------------------------------------------------------------------------------
# writing


def _bound_text(value: float) -> str:
    return "inf" if value == float("inf") else float(value).hex()


LONG_BITS = 128
"""A midpoint whose numerator and denominator take more than this many bits (a norm's or
tanh's enclosure) is written rounded to a grid finer than a unit in the last place of its
budget (:func:`_shortened`), so that a corpus of deep norm stacks is not gigabytes."""


def _shortened(value: Fraction, limit: float) -> tuple[Fraction, float, Fraction]:
    """``value`` and ``limit`` as written, and how far the value moved.

    A long midpoint with a finite, non-zero budget ``b`` is rounded to a multiple of
    ``g = 2**(floor(log2 b) - 54)``: it moves by at most ``g/2``, less than one unit in the
    last place of ``b``, and the budget is written one double higher, so every value the
    budget allowed around the true midpoint is still allowed around the written one. Under
    an infinite budget (nothing is checked) it is written as the nearest double."""
    if value.numerator.bit_length() + value.denominator.bit_length() <= LONG_BITS or (
            limit == 0):
        return value, limit, Fraction(0)
    if limit == np.inf:  # nothing is checked there: the nearest double says enough
        near = Fraction(float(value)) if abs(value) < 2**1023 else Fraction(round(value))
        return near, limit, Fraction(0)
    grid = Fraction(2) ** (math.frexp(limit)[1] - 1 - 54)
    near = round(value / grid) * grid
    return near, float(np.nextafter(limit, np.inf)), abs(near - value)


def _array(exact: np.ndarray, budget: np.ndarray, moved: list[Fraction]) -> Doc:
    """An array of the entry: exact values as text, budgets as hex floats; ``moved`` gets
    how far each shortened midpoint moved."""
    shape = list(np.shape(exact))
    limits = np.broadcast_to(np.asarray(budget, dtype=np.float64), shape).reshape(-1).tolist()
    texts, bounds = [], []
    for value, limit in zip(np.asarray(exact).reshape(-1).tolist(), limits, strict=True):
        short, bound, shift = _shortened(Fraction(value), limit)
        moved.append(shift)
        texts.append(rational(short))
        bounds.append(_bound_text(bound))
    return {"shape": shape, "exact": texts, "budget": bounds}


def _enclosure(slack: Fraction, moved: Fraction) -> str:
    """The enclosure's half-width as text: the slack plus the largest move of a shortened
    midpoint, rounded up to a double when it is long."""
    width = slack + moved
    if width.numerator.bit_length() + width.denominator.bit_length() <= LONG_BITS:
        return rational(width)
    near = Fraction(float(width))
    return rational(near if near >= width else Fraction(float(np.nextafter(float(width),
                                                                             np.inf))))


def _exactly(prop: str, where: str, budget: np.ndarray) -> np.ndarray:
    arrays = EXACT.get(prop, ())
    if prop in EXACT and (arrays is None or where in arrays):
        return np.where(np.isinf(budget), np.inf, 0.0)
    return budget


def expectation(case: CorpusCase) -> Doc:
    """The ``expect`` object of an entry: the spec's value with its budget (and the output
    tangent with its budget in forward mode), or its error."""
    exact: ExactResult = evaluate(case.request)
    if exact.error is not None:
        shapes = exact.error.shapes
        return {"kind": "error", "error": exact.error.kind,
                "shapes": None if shapes is None else [list(s) for s in shapes]}
    assert exact.output is not None and exact.grads is not None
    budget = error_budget(case.request, exact=exact)
    moved: list[Fraction] = []
    read = READS.get(case.property, tuple(exact.grads))
    grads = {name: _array(grad, _exactly(case.property, name, budget.grads[name]), moved)
             for name, grad in exact.grads.items() if name in read}
    doc = {"kind": "value", "output": _array(exact.output, _exactly(
        case.property, "output", budget.output), moved), "grads": grads}
    if case.request.forward_mode and exact.tangent is not None:
        limit = np.full(np.shape(exact.tangent), np.inf) if budget.tangent is None else (
            budget.tangent)
        doc["tangent"] = _array(exact.tangent, _exactly(case.property, "tangent", limit), moved)
    return {**doc, "enclosure": _enclosure(exact.slack, max(moved, default=Fraction(0)))}


def checks(case: CorpusCase, expect: str) -> tuple[str, ...]:
    """What the law of ``case``'s property checks on its request (see :data:`LAW_CHECKS`)."""
    if expect == "error":
        return REFUSED_CHECKS.get(case.property, ("error", "shapes", "untouched"))
    if case.property in LAW_CHECKS:
        return LAW_CHECKS[case.property]
    if case.mode == "jvp":
        return TANGENT
    return (*VALUE, "tangent") if case.request.forward_mode else VALUE


def _ops(requests: Sequence[Request]) -> list[str]:
    return sorted({n.op for r in requests for n in r.program.nodes})


def _mode(requests: Sequence[Request]) -> str:
    return "jvp" if any(r.forward_mode for r in requests) else "vjp"


def entry_doc(case: CorpusCase | CorpusGroup, ident: str) -> Doc:
    """The file of an entry (one request and its expected answer) or of a group."""
    head = {"resverify-corpus": FORMAT, "id": ident, "property": case.property,
            "family": case.family, "source": case.source}
    if isinstance(case, CorpusGroup):
        requests = list(case.group.requests)
        return {**head, "kind": "group", "dtype": case.dtype, "ops": _ops(requests),
                "mode": _mode(requests), **group_files.to_doc(case.group)}
    request = case.request
    expect = expectation(case)
    asked = checks(case, expect["kind"])
    doc = {**head, "dtype": request.dtype, "ops": _ops([request]), "mode": _mode([request]),
           "checks": list(asked), "request": request_to_dict(request), "expect": expect}
    if "state" in asked:
        if case.probe is None:
            raise InvalidProgram(f"{case.source} of {case.property}: the law ran no probe "
                                 "around its refusal, so its entry cannot check state")
        doc["probe"] = request_to_dict(case.probe)
    return doc


def schema() -> dict[str, Any]:
    """The JSON Schema of the corpus files (manifest and entries)."""
    return packaged_schema("resverify.spec", SCHEMA)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("resverify")
    except metadata.PackageNotFoundError:
        return "unknown"


def export(folder: Path, select: Sequence[str] = (),
           progress: Callable[[str], None] = lambda _: None) -> Doc:
    """Write the corpus into ``folder`` (``entries/``, the manifest, the schema); returns
    the manifest. ``select``: see :func:`collect`."""
    cases = collect(select, progress)
    (folder / "entries").mkdir(parents=True, exist_ok=True)
    listed = []
    for number, case in enumerate(cases, 1):
        dtype = case.dtype if isinstance(case, CorpusGroup) else case.request.dtype
        ident = f"{number:04d}-{case.property}-{dtype}"
        doc = entry_doc(case, ident)
        path = f"entries/{ident}.json"
        (folder / path).write_text(json.dumps(doc, sort_keys=True) + "\n", encoding="utf-8")
        listed.append({"id": ident, "file": path, "property": case.property,
                       "family": case.family, "source": case.source, "dtype": dtype,
                       "ops": doc["ops"], "mode": doc["mode"],
                       "expect": "group" if "relations" in doc else doc["expect"]["kind"]})
        progress(f"wrote {path}")
    manifest = {"resverify-corpus": FORMAT, "kind": "manifest", "generator": _version(),
                "schema": SCHEMA, "dtypes": list(DTYPES), "entries": listed}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n",
                                   encoding="utf-8")
    (folder / SCHEMA).write_text(json.dumps(schema(), indent=2) + "\n", encoding="utf-8")
    return manifest


# ----------------------------------------------------------------------------------------
# reading and running


@dataclass(frozen=True)
class Entry:
    """One entry read back: its listing in the manifest, its request, its expectation."""

    listing: Mapping[str, Any]
    request: Request
    expected: Expected
    checks: tuple[str, ...]


@dataclass(frozen=True)
class GroupEntry:
    """One group read back: its listing in the manifest and the group."""

    listing: Mapping[str, Any]
    group: Group


def _read_json(path: Path, what: str) -> Any:
    try:
        return parse_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"cannot read {what} {str(path)!r}: {reason}") from None
    except InvalidProgram as exc:
        raise UsageError(f"{what} {str(path)!r}: {exc}") from None


@cache
def _validator(ref: str) -> Any:
    """The schema's validator for a manifest or an entry. The elements of the exact and
    budget arrays (the bulk of an entry) are checked as strings here and parsed one by one
    by :func:`_arrays` (jsonschema per element would take most of a run)."""
    import jsonschema

    full = schema()
    defs = json.loads(json.dumps(full["$defs"]))
    for key in ("exact", "budget"):
        defs["array"]["properties"][key]["items"] = {"type": "string"}
    return jsonschema.Draft202012Validator({"$schema": full["$schema"], "$defs": defs,
                                            "$ref": f"#/$defs/{ref}"})


def _validate(doc: Any, where: str, ref: str) -> None:
    import jsonschema

    error = jsonschema.exceptions.best_match(_validator(ref).iter_errors(doc))
    if error is not None:
        at = "/".join(str(p) for p in error.absolute_path) or "top level"
        raise UsageError(f"{where}: bad field at {at}: {' '.join(error.message.split())[:300]}")


def _bound(text: str, where: str) -> float:
    if not _BOUND.fullmatch(text):
        raise UsageError(f"{where}: budget {text!r} is not a hex float or inf")
    return float.fromhex(text)


def _arrays(doc: Mapping[str, Any], where: str) -> tuple[np.ndarray, np.ndarray]:
    shape = tuple(doc["shape"])
    if len(doc["exact"]) != int(np.prod(shape)) or len(doc["budget"]) != len(doc["exact"]):
        raise UsageError(f"{where}: exact and budget must each fill shape {list(shape)}")
    exact = np.empty(len(doc["exact"]), dtype=object)
    exact[:] = [_rational(text, where) for text in doc["exact"]]
    bound = [_bound(text, where) for text in doc["budget"]]
    return exact.reshape(shape), np.array(bound, dtype=np.float64).reshape(shape)


def _rational(text: str, where: str) -> Fraction:
    if not _RATIONAL.fullmatch(text):
        raise UsageError(f"{where}: exact value {text!r} is not a rational like -13/4")
    return Fraction(text)


def _expected(doc: Mapping[str, Any], where: str) -> Expected:
    if doc["kind"] == "error":
        shapes = doc.get("shapes")
        return Expected(error=doc["error"],
                        shapes=None if shapes is None else tuple(tuple(s) for s in shapes))
    output, output_budget = _arrays(doc["output"], f"{where} output")
    pairs = {k: _arrays(v, f"{where} grad {k}") for k, v in doc["grads"].items()}
    tangent, tangent_budget = (_arrays(doc["tangent"], f"{where} tangent")
                               if "tangent" in doc else (None, None))
    return Expected(output, {k: v[0] for k, v in pairs.items()}, output_budget,
                    {k: v[1] for k, v in pairs.items()}, tangent=tangent,
                    tangent_budget=tangent_budget)


def load(folder: Path) -> Iterator[Entry | GroupEntry]:
    """Every entry and group of the corpus in ``folder``, checked against the schema as it
    is read; a one-line :class:`UsageError` naming the file for anything wrong."""
    manifest = _read_json(folder / MANIFEST, "corpus manifest")
    _validate(manifest, f"corpus manifest {str(folder / MANIFEST)!r}", "manifest")
    for listing in manifest["entries"]:
        path = folder / listing["file"]
        doc = _read_json(path, "corpus entry")
        where = f"corpus entry {str(path)!r}"
        grouped = isinstance(doc, dict) and doc.get("kind") == "group"
        _validate(doc, where, "group" if grouped else "entry")
        try:
            if grouped:
                yield GroupEntry(listing, group_files.from_doc(doc, where))
                continue
            request = request_from_dict(doc["request"])
            expected = _expected(doc["expect"], where)
            if "probe" in doc:
                expected = replace(expected, probe=request_from_dict(doc["probe"]))
        except (ResverifyError, ValueError, ZeroDivisionError) as exc:
            raise UsageError(f"{where}: {' '.join(str(exc).split())[:300]}") from None
        yield Entry(listing, request, expected, tuple(doc["checks"]))


def load_group(path: Path) -> Group:
    """The group in the file ``path`` (a group of a corpus, or one made from a saved vector
    by ``resverify vectors group``); a one-line :class:`UsageError` for anything wrong."""
    doc = _read_json(path, "vector group")
    where = f"vector group {str(path)!r}"
    _validate(doc, where, "group")
    try:
        return group_files.from_doc(doc, where)
    except (ResverifyError, ValueError, ZeroDivisionError) as exc:
        raise UsageError(f"{where}: {' '.join(str(exc).split())[:300]}") from None


def group_from_vector(path: Path, prop: str | None = None) -> Doc:
    """The group file that pins a failure of a law relating several answers: the requests
    the law of ``prop`` (default: the property the saved vector records) sends when it is
    called on the saved request, recorded on the exact oracle, with the relation."""
    doc = _read_json(path, "vector")
    where = f"vector {str(path)!r}"
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: not a request document")
    prop = prop or (doc.pop("vector", None) or {}).get("property")
    doc.pop("vector", None)
    if not prop:
        raise UsageError(f"{where} records no property: give --property")
    try:
        request = request_from_dict(doc)
        group = _law_group(prop, request)
    except ResverifyError as exc:
        raise UsageError(f"{where}: {' '.join(str(exc).split())[:300]}") from None
    case = CorpusGroup(prop, "pinned", f"made from {path.name}", request.dtype, group)
    return entry_doc(case, f"{prop}-{request.dtype}-{digest(request)}")


def _law_group(prop: str, request: Request) -> Group:
    """The group the law of ``prop`` builds when it is called on ``request`` alone (the
    saved vector of a failure), driven on the exact oracle; only for the laws that take
    one request and send the others themselves (:data:`FROM_ONE_REQUEST`)."""
    laws = FROM_ONE_REQUEST
    if prop not in laws:
        raise UsageError(f"no vector group can be made from one saved request of {prop} "
                         f"(only of {', '.join(laws)})")
    ends = {n.name: n for n in request.program.nodes}[request.program.output]
    if ends.op != "residual_add":
        raise UsageError(f"the law of {prop} sends no group on this request (its output "
                         f"is {ends.op}, not a merge)")
    with recording() as groups:
        laws[prop](Oracle(), request)
    return groups[0]


def run(folder: Path, backend: Backend) -> Iterator[tuple[Entry | GroupEntry, Judged]]:
    """Each entry and group of the corpus with its verdict on ``backend``."""
    for entry in load(folder):
        if isinstance(entry, GroupEntry):
            yield entry, judge_group(backend, entry.group)
        else:
            yield entry, judge(backend, entry.request, entry.expected, entry.checks)
