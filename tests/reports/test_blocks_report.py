"""The blocks section of the main report: a blocks-only report follows report.schema.json
(and the schema can refuse one), the main Markdown and HTML writers render the section, the
plots are pure functions of it, a documented finding reads as expected (or fixed), and what a
block hands over is escaped.

Why made-up records: the renderers read law records, not blocks, so a hand-written pass, a
failure with a saved vector, an unjudged law, an infinite headroom and a recipe with a
documented finding cover every branch in milliseconds; the command's own tests check a real
block's output against the same schema.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import jsonschema
import pytest

from tests.installed import skip_without_torch

skip_without_torch()  # what follows imports torch (E402 allowed here: pyproject.toml)

from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.check import LawRecord
from resverify.blocks.recipe import Finding
from resverify.reports import blocks as report
from resverify.reports.html import render_html
from resverify.reports.json_report import SCHEMA_VERSION, blocks_report, strip_timings, validate
from resverify.reports.markdown import render_markdown
from tests.blocks.broken_blocks import CORRECT

HOSTILE = "Enc<script>alert(1)</script>|&"
REPLAY = "resverify blocks replay 'torch.TransformerEncoderLayer(pre)' --law zero_branch " \
    "--dtype float32 --mode eval --example batch=1,seq=1,seed=0,weight_exp=0,input_exp=0"


def records(name: str) -> list[LawRecord]:
    return [
        LawRecord(name, "decomposition", "float32", "eval", "pass", 5),
        LawRecord(name, "zero_branch", "float32", "eval", "fail", 12,
                  {f"max_{k}[{site}]": 0.0 for k in ("from_identity", "from_law")
                   for site in ("self-attention", "feed-forward")},
                  message="zero_branch: y[0] = 1.0, expected 0.5 | <b>bold</b>"),
        LawRecord(name, "gradient_skip", "float32", "eval", "unjudged", 0,
                  message="the forward decomposition fails"),
        LawRecord(name, "stream_dtype", "float32", "eval", "pass", 5,
                  {"swamped[self-attention]": 0.25, "swamped[feed-forward]": 0.5,
                   "headroom_log2": float("inf")}),
        LawRecord(name, "stream_dtype", "bfloat16", "eval", "pass", 5,
                  {"swamped[self-attention]": 0.75, "swamped[feed-forward]": 1.0,
                   "headroom_log2": 100.0}),
    ]


def a_run(name: str = HOSTILE, vector: str = "out/vectors/v.json") -> report.BlockRun:
    recipe = dataclasses.replace(encoder(True), name=name)
    return report.BlockRun(recipe, "torch_nn", "torch", "2.13.0", records(name),
                           [0.5, 1.0, 0.25, 0.125, 0.125], {1: vector}, {1: REPLAY})


def scaled_run() -> report.BlockRun:
    recipe = CORRECT["scaled"]
    gammas = {f"swamped_at_gamma[{g!r}][{s.label}]": 1.0 - g / 2
              for s in recipe.sites for g in (1e-4, 1.0)}
    passing = [dataclasses.replace(r, block=recipe.name) for r in records(recipe.name)
               if r.verdict == "pass"]
    gamma = LawRecord(recipe.name, "affine_in_gamma", "bfloat16", "eval", "pass", 5, gammas)
    return report.BlockRun(recipe, "broken_blocks", "torch", None, [*passing, gamma], ())


def document() -> dict[str, Any]:
    """The blocks section of two runs (one failing, one passing)."""
    return report.section([a_run(), scaled_run()], profile="dev", seed=3, examples=5,
                          skipped={"timm": "ModuleNotFoundError: No module named 'timm'"})


def full(section: dict[str, Any]) -> dict[str, Any]:
    """The report a blocks run writes around ``section``."""
    return blocks_report(section, seconds=2.0)


def test_a_blocks_only_report_follows_the_main_schema_and_is_strict_json() -> None:
    doc = document()
    whole = full(doc)
    validate(whole)
    text = json.dumps(whole, allow_nan=False)  # an infinite figure is text, not Infinity
    assert json.loads(text) == whole
    assert whole["blocks"] == doc
    assert (whole["schema"], whole["schema_version"]) == ("resverify-report", SCHEMA_VERSION)
    assert whole["run"] == {"seed": 3, "profile": "dev", "backends": [], "pytest_args": [],
                            "pytest_exit_code": None}
    assert (whole["backends"], whole["claims"], whole["properties"]) == ([], [], [])
    assert (whole["complete"], whole["status"]) == (True, "fail")
    first, second = doc["blocks"]
    assert (doc["verdict"], first["verdict"], second["verdict"]) == ("fail", "fail", "pass")
    assert doc["counts"] == {"pass": 7, "fail": 1, "unjudged": 1, "expected": 0, "fixed": 0}
    assert first["laws"][3]["figures"]["headroom_log2"] == "inf"
    assert first["laws"][1]["failure"] == {  # a made-up record: no request for the vector
        "message": records(HOSTILE)[1].message, "kind": "law", "vector": "out/vectors/v.json",
        "replay": REPLAY, "vector_replay": None}
    assert first["laws"][0]["failure"] is None and first["time_seconds"] == 2.0
    assert first["declares"]["sites"][0]["norms"] == ["norm1"]
    assert second["declares"]["sites"][0]["scale"] == "ls1.gamma"
    assert doc["skipped"] == [{"source": "timm",
                               "reason": "ModuleNotFoundError: No module named 'timm'"}]


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return change


LAW = ("blocks", "blocks", 0, "laws")


@pytest.mark.parametrize(("what", "change"), [
    ("a verdict the suite does not give", _set((*LAW, 0, "verdict"), "passed")),
    ("an expected failure without its finding", _set((*LAW, 1, "verdict"), "expected")),
    ("a fixed finding without its finding", _set((*LAW, 0, "verdict"), "fixed")),
    ("a block verdict a block cannot have", _set(("blocks", "blocks", 0, "verdict"), "fixed")),
    ("counts without the expected records", _set(("blocks", "counts", "expected"), KeyError)),
    ("a finding without its doc", _set((*LAW, 1, "known"), {"reason": "r", "kind": "law"})),
    ("a failure without its failure object", _set((*LAW, 1, "failure"), None)),
    ("a pass without a failure object but with one", _set(
        (*LAW, 0, "failure"), {"message": "m", "kind": "law", "vector": None, "replay": None})),
    ("a pass that judged no example", _set((*LAW, 0, "examples"), 0)),
    ("a vector's replay that is no command", _set((*LAW, 1, "failure", "vector_replay"), 3)),
    ("a figure that is not a number", _set((*LAW, 3, "figures", "headroom_log2"), "large")),
    ("an unknown dtype", _set((*LAW, 0, "dtype"), "float8")),
    ("a block without a name", _set(("blocks", "blocks", 0, "name"), KeyError)),
    ("a key the schema does not know", _set(("blocks", "blocks", 0, "colour"), "red")),
    ("a recipe without sites", _set(("blocks", "blocks", 0, "declares", "sites"), [])),
    ("a swamped fraction above 1", _set(("blocks", "blocks", 1, "probes", "layerscale", 0,
                                         "swamped"), 1.5)),
    ("another document", _set(("schema",), "resverify-blocks")),
    ("a check run without a backend", _set(("blocks",), KeyError)),
])
def test_the_schema_refuses_a_broken_document(
        what: str, change: Callable[[dict[str, Any]], None]) -> None:
    doc = copy.deepcopy(full(document()))
    validate(doc)  # the change, not the document, is what the schema refuses
    change(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)


def test_a_block_verdict_needs_evidence() -> None:
    run = dataclasses.replace(a_run(), records=[records("b")[2]])
    assert report.section([run], profile="ci", seed=0, examples=25)["verdict"] == "unjudged"
    empty = dataclasses.replace(a_run(), records=[])
    assert report.section([empty], profile="ci", seed=0, examples=25)["blocks"][0][
        "verdict"] == "unjudged"
    assert report.section([], profile="ci", seed=0, examples=25)["verdict"] == "unjudged"


def test_an_interrupted_run_is_not_a_pass_and_says_so() -> None:
    passing = dataclasses.replace(scaled_run())
    doc = report.section([passing], profile="dev", seed=0, examples=5, interrupted="SIGTERM")
    whole = full(doc)
    validate(whole)
    assert (doc["verdict"], doc["blocks"][0]["verdict"]) == ("partly judged", "pass")
    assert (whole["complete"], whole["status"]) == (False, "incomplete")
    assert "Interrupted (SIGTERM)" in render_markdown(whole)
    assert "Interrupted (SIGTERM)" in render_html(whole, {})
    done = full(report.section([passing], profile="dev", seed=0, examples=5))
    assert (done["blocks"]["verdict"], done["complete"], done["status"]) == (
        "pass", True, "pass")


def test_markdown_has_the_summary_a_section_per_block_and_escapes_cells() -> None:
    text = render_markdown(full(document()))
    assert text.startswith("# resverify: FAIL\n\nResidual blocks · profile `dev` · seed 3")
    assert "\n## Residual blocks: ❌ fail\n" in text
    assert "| properties |" not in text and "## Backends" not in text  # a blocks-only run
    assert "2 blocks, profile dev (5 examples a law), seed 3: 7 pass, 1 fail, 1 unjudged, " \
        "0 expected (documented findings), 0 fixed." in text
    assert "### Enc&lt;script&gt;alert(1)&lt;/script&gt;\\|&amp;: ❌ fail" in text
    assert "### ScaledEncoderLayer: ✅ pass" in text
    assert f"replay: `{REPLAY}`" in text
    assert "torch 2.13.0; recipe from torch_nn, " in text
    assert "<script>" not in text
    assert "`zero_branch: y[0] = 1.0, expected 0.5 | <b>bold</b>`" in text  # a code span
    assert "- skipped timm: ModuleNotFoundError" in text


class Page(HTMLParser):
    """The tags, ids and text of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.ids: list[str] = []
        self.text: list[str] = []
        self.srcs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        found = dict(attrs)
        if found.get("id"):
            self.ids.append(str(found["id"]))
        if tag == "img":
            self.srcs.append(str(found.get("src")))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    return page


def test_the_html_page_opens_with_its_sections_plots_inlined_and_everything_escaped() -> None:
    doc = document()
    images = report.plots(doc)
    page = parse(render_html(full(doc), {}, block_plots=images))
    assert page.ids == ["blocks", "block-0", "block-1"]
    assert "script" not in page.tags and "b" not in page.tags
    text = "".join(page.text)
    assert HOSTILE in text and "| <b>bold</b>" in text  # shown as text, not markup
    assert "Residual blocks: fail" in text
    assert len(page.srcs) == len(images) == 3
    assert all(src.startswith("data:image/png;base64,") for src in page.srcs)
    assert not [s for s in page.srcs if "://" in s]  # self-contained
    bare = parse(render_html(full(doc), {}))
    assert "section" in bare.tags and "img" not in bare.tags
    # a law's name stays whole in its cell (the page's cells may otherwise break anywhere)
    assert '<td class="nw">decomposition</td>' in render_html(full(doc), {})


def test_plots_are_pngs_where_there_is_data_and_the_same_bytes_each_time() -> None:
    doc = document()
    images = report.plots(doc)
    assert sorted(images) == ["block0-swamped.png", "block0-zero.png", "block1-swamped.png"]
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in images.values())
    assert report.plots(copy.deepcopy(doc)) == images
    assert report.swamped(doc["blocks"][0]) == {
        "self-attention": {"float32": 0.25, "bfloat16": 0.75},
        "feed-forward": {"float32": 0.5, "bfloat16": 1.0}}
    assert report.headroom(doc["blocks"][0]) == {"float32": "inf", "bfloat16": 100.0}


def found_run(outcomes: dict[str, str]) -> report.BlockRun:
    """A block whose recipe documents zero_branch and stream_dtype as failing, with one
    record per law of ``outcomes`` (law -> pass, fail or unjudged)."""
    finding = Finding("the stream turns float32", "docs/findings/blocks-notes.md#5-t5")
    recipe = dataclasses.replace(encoder(True), name="Documented", findings={
        "zero_branch": finding, "stream_dtype": finding})
    recs = [LawRecord("Documented", law, "float16", "eval", outcome, 5 if outcome != "unjudged"
                      else 0, message="" if outcome == "pass" else f"{law} says no")
            for law, outcome in outcomes.items()]
    return report.BlockRun(recipe, "hf", "transformers", "5.24.0", recs, [0.1] * len(recs))


def test_a_documented_failure_is_expected_and_the_run_passes() -> None:
    run = found_run({"decomposition": "pass", "zero_branch": "fail", "stream_dtype": "fail"})
    doc = full(report.section([run], profile="dev", seed=0, examples=5))
    validate(doc)
    laws = doc["blocks"]["blocks"][0]["laws"]
    assert [r["verdict"] for r in laws] == ["pass", "expected", "expected"]
    assert laws[0]["known"] is None
    assert laws[1]["known"] == {"reason": "the stream turns float32",
                                "doc": "docs/findings/blocks-notes.md#5-t5", "kind": "law"}
    assert laws[1]["failure"]["message"] == "zero_branch says no"
    assert (doc["blocks"]["blocks"][0]["verdict"], doc["blocks"]["verdict"], doc["status"]) == (
        "expected", "expected", "pass")
    assert doc["blocks"]["counts"] == {"pass": 1, "fail": 0, "unjudged": 0, "expected": 2,
                                       "fixed": 0}
    text = render_markdown(doc)
    assert "| zero_branch | float16 | eval | ☑️ expected | 5 |" in text
    assert "documented finding: the stream turns float32 (docs/findings/blocks-notes.md#5-t5)" \
        in text
    page = "".join(parse(render_html(doc, {})).text)
    assert "documented finding: the stream turns float32 (docs/findings/blocks-notes.md#5-t5)" \
        in page


def test_a_documented_failure_that_passes_now_is_fixed_and_fails_the_run() -> None:
    run = found_run({"zero_branch": "pass", "stream_dtype": "fail"})
    doc = full(report.section([run], profile="dev", seed=0, examples=5))
    validate(doc)
    laws = doc["blocks"]["blocks"][0]["laws"]
    assert [r["verdict"] for r in laws] == ["fixed", "expected"]
    assert (doc["blocks"]["blocks"][0]["verdict"], doc["status"]) == ("fail", "fail")
    assert "remove the finding from the recipe" in render_markdown(doc)
    assert "remove the finding from the recipe" in "".join(parse(render_html(doc, {})).text)


def test_a_documented_law_that_judged_nothing_is_unjudged() -> None:
    """A documented law that judged nothing stays ``unjudged``; beside a record that failed
    as documented, the run is ``partly judged`` (something was judged), not ``unjudged``,
    and never ``pass``."""
    run = found_run({"zero_branch": "unjudged", "stream_dtype": "fail"})
    doc = full(report.section([run], profile="dev", seed=0, examples=5))
    validate(doc)
    assert [r["verdict"] for r in doc["blocks"]["blocks"][0]["laws"]] == ["unjudged", "expected"]
    assert doc["status"] == "partly judged"
    alone = found_run({"zero_branch": "unjudged"})
    doc = full(report.section([alone], profile="dev", seed=0, examples=5))
    assert doc["status"] == "unjudged", doc["blocks"]["counts"]


def test_a_blocks_report_without_its_seconds_is_the_same_whatever_the_clock() -> None:
    slow = dataclasses.replace(a_run(), seconds=[500.0] * 5)
    one, two = (full(report.section([r], profile="dev", seed=3, examples=5))
                for r in (a_run(), slow))
    assert one != two and strip_timings(one) == strip_timings(two)


def test_a_check_report_with_a_blocks_section_renders_both_and_the_section_joins_its_status(
        ) -> None:
    from resverify.impl import NumpyBackend
    from resverify.reports.json_report import build_report

    def doc(blocks: dict[str, Any] | None) -> dict[str, Any]:
        return build_report(run={"seed": 3, "profile": "ci", "backends": ["numpy"],
                                 "pytest_args": [], "pytest_exit_code": 0},
                            backends=[NumpyBackend()], claims=[], properties=[],
                            complete=True, warnings=[], timings={}, blocks=blocks)

    without, failing = doc(None), doc(document())
    passing = doc(report.section([scaled_run()], profile="dev", seed=3, examples=5))
    for each in (without, failing, passing):
        validate(each)
    # numpy ran no test here, so the run is 'unjudged' without a failing section
    assert (without["status"], passing["status"], failing["status"]) == (
        "unjudged", "unjudged", "fail")
    text = render_markdown(failing)
    assert "## Backends" in text and "\n## Residual blocks: ❌ fail\n" in text
    assert "## Residual blocks" not in render_markdown(without)
    page = parse(render_html(failing, {}))
    assert "blocks" in page.ids and "Backends" in "".join(page.text)
    assert "blocks" not in parse(render_html(without, {})).ids


def test_the_plotted_probes_are_the_laws_figures() -> None:
    """The zero-branch rows are the zero_branch law's eval figures per dtype and site (a
    failing record keeps those of its example), the LayerScale rows the affine_in_gamma
    law's, by γ then site; a record without them is a row that says why."""
    first, second = document()["blocks"]
    assert first["probes"]["zero_branch"] == [
        {"dtype": "float32", "site": site, "from_identity": 0.0, "from_law": 0.0, "note": ""}
        for site in ("self-attention", "feed-forward")], first["probes"]
    sites = [s.label for s in CORRECT["scaled"].sites]
    assert second["probes"]["layerscale"] == [
        {"dtype": "bfloat16", "site": site, "gamma": g, "swamped": 1.0 - g / 2}
        for g in (1e-4, 1.0) for site in sites], second["probes"]
    bare = dataclasses.replace(a_run(), records=[LawRecord(
        "b", "zero_branch", "float64", "eval", "unjudged", 0, message="no example")])
    rows = report.probes(bare)["zero_branch"]
    assert [(r["from_identity"], r["from_law"], r["note"]) for r in rows] == [
        (None, None, "not measured: zero_branch unjudged")] * 2, rows
