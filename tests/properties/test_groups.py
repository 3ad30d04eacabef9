"""Vector groups: a law that relates several answers is exported (and pinned) with all its
requests and the relation, judged exactly against its bound, and a failure that one saved
request cannot reproduce (JAX reading a subnormal input as zero in the merge, which the
sample variance identity sees) is pinned by its group as an expected known failure."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from resverify.cli.main import main
from resverify.impl.numpy_backend import NumpyBackend
from resverify.properties import corpus, known_failures, relations
from resverify.properties import groups as group_files
from resverify.properties.judge import expected_from_spec, judge, judge_group
from resverify.reports.json_report import known_entries
from resverify.reports.verdicts import vector_status
from resverify.spec.codec import request_from_dict
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request, Result, Value

ROOT = Path(__file__).resolve().parents[2]
VARIANCE = "sample_variance_of_merge_is_sum_plus_twice_covariance"
PINNED = ROOT / "examples" / "known-failures" / f"jax-{VARIANCE}-float32-group.json"
PROGRAM = {"inputs": [{"name": "x", "shape": [2]}],
           "nodes": [{"name": "f0", "op": "tanh", "args": ["x"]},
                     {"name": "s0", "op": "scale", "args": ["f0"], "alpha": "0"},
                     {"name": "h0", "op": "residual_add", "args": ["x", "s0"]}],
           "output": "h0"}
# the request the suite saved when jax failed the law (x: 0 and float32's least subnormal)
SAVED: dict[str, Any] = {
    "resverify": 1, "kind": "request", "dtype": "float32", "program": PROGRAM,
    "inputs": {"x": {"shape": [2], "data": ["0x0.0p+0", "0x1.0p-149"]}},
    "cotangent": {"shape": [2], "data": ["0x1.0p+0", "0x1.0p+0"]},
    "vector": {"property": VARIANCE, "backend": "jax", "kind": "law", "message": "..."}}


class MergeReadsSubnormalsAsZero(NumpyBackend):
    """What XLA on the CPU does (DAZ): a program ending in a merge reads a subnormal input as
    zero; a program ending elsewhere (the branch alone) is unaffected."""

    name = "merge-daz"

    def run(self, request: Request) -> Result:
        end = {n.name: n for n in request.program.nodes}[request.program.output]
        if end.op != "residual_add":
            return super().run(request)
        tiny = np.finfo(np.float32).tiny
        flushed = {k: np.where(np.abs(v) < tiny, 0, v).astype(v.dtype)
                   for k, v in request.inputs.items()}
        return super().run(dataclasses.replace(request, inputs=flushed))


def _saved(tmp_path: Path) -> Path:
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(SAVED))
    return path


def test_one_saved_request_cannot_pin_the_merge_daz_failure_but_its_group_does(
        tmp_path: Path) -> None:
    doc = dict(SAVED)
    doc.pop("vector")
    request = request_from_dict(doc)
    daz = MergeReadsSubnormalsAsZero()
    alone = judge(daz, request, expected_from_spec(request))
    assert vector_status(alone) == "pass", alone  # each output is within its own budget
    group = corpus.load_group(Path(_group_file(tmp_path)))
    assert len(group.requests) == 2
    found = judge_group(daz, group)
    assert (vector_status(found), found.kind) == ("fail", "law"), found
    assert "Var(y) - [Var x + Var f + 2Cov(x,f)]" in found.message, found.message
    assert vector_status(judge_group(NumpyBackend(), group)) == "pass"


def _group_file(tmp_path: Path) -> str:
    out = tmp_path / "group.json"
    assert main(["vectors", "group", str(_saved(tmp_path)), "--out", str(out)]) == 0
    return str(out)


def test_pinned_group_is_expected_while_it_fails_and_fixed_once_it_passes(
        tmp_path: Path) -> None:
    _group_file(tmp_path)
    (tmp_path / "known.toml").write_text(
        f'[[failure]]\nbackend = "merge-daz"\nproperty = "{VARIANCE}"\nvector = "group.json"\n'
        'reason = "reads a subnormal input as zero in the merge"\n')
    entries = known_failures.load(tmp_path / "known.toml")
    assert entries[0].group is not None and entries[0].dtype == "float32"
    for backend, status in ((MergeReadsSubnormalsAsZero(), "expected"),
                            (NumpyBackend(), "fixed")):
        checked = known_entries(
            known_failures.judge_entries(entries, {"merge-daz": backend}), tmp_path)
        assert checked[0]["status"] == status, (backend.name, checked)


def test_shipped_jax_variance_groups_follow_the_schema_and_pass_on_numpy() -> None:
    shipped = sorted(PINNED.parent.glob("*-group.json"))
    assert {p.name.split("-")[-2] for p in shipped} == {"float32", "bfloat16"}, shipped
    for path in shipped:
        doc = json.loads(path.read_text())
        jsonschema.validate(doc, corpus.schema(), cls=jsonschema.Draft202012Validator)
        assert len(corpus.load_group(path).requests) == 2
    group = corpus.load_group(PINNED)
    assert vector_status(judge_group(NumpyBackend(), group)) == "pass"
    assert vector_status(judge_group(MergeReadsSubnormalsAsZero(), group)) == "fail"


def test_group_of_a_law_taking_several_requests_is_a_one_line_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = {**SAVED, "vector": {**SAVED["vector"], "property": "gradient_matches_spec"}}
    (tmp_path / "other.json").write_text(json.dumps(doc))
    assert main(["vectors", "group", str(tmp_path / "other.json"), "--out",
                 str(tmp_path / "g.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gradient_matches_spec" in err, err


# ----------------------------------------------------------------------------------------
# the linear relation's rule, exactly at its bound


class Fixed:
    """A backend answering fixed outputs (zero gradients), one per request, in order."""

    name = "fixed"
    capabilities = NumpyBackend.capabilities

    def __init__(self, *outputs: list[float]) -> None:
        self.answers = [np.array(v, np.float64) for v in outputs]

    def run(self, request: Request) -> Result:
        k = int(request.inputs["x"][0])
        return Value(self.answers[k], {"x": np.zeros_like(self.answers[k])})


def _pair(bound: list[Fraction | float], coef: Fraction = Fraction(-1)) -> relations.Group:
    program = Program((Input("x", (2,)),), (Node("y", "relu", ("x",)),), "y")
    requests = tuple(Request(program, {"x": np.array([k, 0.0])}, "float64", np.ones(2))
                     for k in (0.0, 1.0))
    terms = (relations.Term(1, "output", Fraction(1)), relations.Term(0, "output", coef))
    return relations.Group(requests, (relations.Linear("y1 against y0", terms,
                                                       np.array(bound, dtype=object)),))


def test_linear_relation_holds_at_its_bound_and_fails_just_beyond() -> None:
    at = _pair([Fraction(1, 4), relations.INF])
    assert vector_status(judge_group(Fixed([1.0, 5.0], [1.25, -7.0]), at)) == "pass"
    beyond = judge_group(Fixed([1.0, 5.0], [1.25 + 2**-52, -7.0]), at)
    assert (vector_status(beyond), beyond.kind) == ("fail", "law"), beyond
    assert "y1 against y0: output[0]" in beyond.message, beyond.message


def test_linear_relation_demands_finite_values_only_where_bounded() -> None:
    at = _pair([Fraction(0), relations.INF])
    assert vector_status(judge_group(Fixed([1.0, 5.0], [1.0, float("nan")]), at)) == "pass"
    assert vector_status(judge_group(Fixed([1.0, float("nan")], [1.0, 5.0]), at)) == "pass"
    broken = judge_group(Fixed([float("inf"), 0.0], [1.0, 0.0]), at)
    assert vector_status(broken) == "fail" and "non-finite" in broken.message, broken


def test_summed_relation_ignores_zero_weights_whatever_the_value() -> None:
    program = Program((Input("x", (2,)),), (Node("y", "relu", ("x",)),), "y")
    request = Request(program, {"x": np.array([0.0, 0.0])}, "float64", np.ones(2))
    weights = np.array([Fraction(2), Fraction(0)], dtype=object)
    summed = relations.Linear("2·y[0]", (relations.Term(0, "output", Fraction(1), weights),),
                              np.array(Fraction(1), dtype=object), "sum")
    group = relations.Group((request,), (summed,))
    assert vector_status(judge_group(Fixed([0.5, float("nan")]), group)) == "pass"
    assert vector_status(judge_group(Fixed([0.5 + 2**-50, 0.0]), group)) == "fail"


def test_group_file_round_trips_terms_weights_and_exact_bounds() -> None:
    group = _pair([Fraction(1, 3), relations.INF], Fraction(-5, 7))
    back = group_files.from_doc(json.loads(json.dumps(group_files.to_doc(group))), "here")
    rel, again = group.relations[0], back.relations[0]
    assert isinstance(again, relations.Linear) and isinstance(rel, relations.Linear)
    assert again.terms == rel.terms and list(again.bound) == list(rel.bound)
    assert [r.inputs["x"].tolist() for r in back.requests] == [[0.0, 0.0], [1.0, 0.0]]
