"""report.html's failure cards: right under the summary, the replay command and the vector
as the prominent text, and the first failing element (backend value, exact value, |diff|,
budget) inline, as the value check that failed recorded it (:class:`Element`)."""

from __future__ import annotations

import html
import re
from fractions import Fraction

import numpy as np
import pytest

from resverify.properties.assertions import Context, Element, PropertyFailure
from resverify.properties.laws_oracle import check_finite_differences
from resverify.reports.html import render_html
from resverify.spec.fixtures import linear_block_request
from tests.reports.fakes import HOSTILE
from tests.reports.test_report_html import _doc

WITHIN = ("grads['x'][0, 1]: backend off = 3.5, spec = 1/2, |diff| = 3 > budget "
          "6.106226635439023e-16 [float64] residual_add(x, linear(x, w))")


ELEMENT = {"element": "grads['x'][0, 1]", "backend": "3.5", "expected": "1/2", "diff": "3",
           "budget": "6.106226635439023e-16"}


def _failing_doc(message: str = WITHIN, element: dict | None = ELEMENT) -> dict:
    doc = _doc()
    failed = next(p for p in doc["properties"] if p["status"] == "fail")
    failed["message"] = message
    failed["vector"] = "resverify-report/vectors/zero_branch-other-0123456789ab.json"
    failed["replay"] = ("resverify replay resverify-report/vectors/zero_branch-other-"
                        "0123456789ab.json --backend other")
    failed["failures"] = [{"message": message, "kind": "law", "vector": failed["vector"],
                           "replay": failed["replay"], "element": element}]
    return doc


def _section(page: str, title: str) -> str:
    start = page.index(f"<h2>{title}")
    end = page.find("<h2", start + 1)
    return page[start:end if end > 0 else len(page)]


def test_failures_come_right_after_the_summary_before_the_matrix() -> None:
    page = render_html(_failing_doc(), {})
    order = [m.group(1) for m in re.finditer(r"<h2[^>]*>([^<(]+)", page)]
    assert order[:3] == ["Summary", "Failures ", "Conformance matrix"], \
        f"sections in the order {order}, expected Summary, Failures, Conformance matrix first"


def test_a_card_shows_the_replay_command_and_the_vector_as_copyable_text() -> None:
    doc = _failing_doc()
    card = _section(render_html(doc, {}), "Failures")
    failed = next(p for p in doc["properties"] if p["status"] == "fail")
    copies = [html.unescape(c)
              for c in re.findall(r'<code class="copy"[^>]*>([^<]*)</code>', card)]
    assert copies == [failed["replay"], failed["vector"]], \
        f"copyable text {copies}, expected the replay command then the vector path"
    assert card.index('class="copy"') < card.index("<pre>"), \
        "the replay command comes after the message, expected it first"


def test_a_card_shows_the_first_failing_element_inline() -> None:
    card = _section(render_html(_failing_doc(), {}), "Failures")
    found = re.search(r'<table class="element">.*?</table>', card, re.S)
    assert found is not None, f"no element table on the card: {card[:800]}"
    cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", found.group(0))]
    assert cells == ["grads['x'][0, 1]", "3.5", "1/2", "3", "6.106226635439023e-16"], \
        f"element row {cells}, expected grads['x'][0, 1], 3.5, 1/2, 3, 6.106226635439023e-16"


def test_a_card_whose_failure_names_no_element_has_no_element_table() -> None:
    card = _section(render_html(_failing_doc("duality: " + HOSTILE, None), {}), "Failures")
    assert '<table class="element">' not in card, "an element table for a message without one"
    assert HOSTILE not in card, "the message reached the card unescaped"


def _raised(check: object) -> PropertyFailure:
    with pytest.raises(PropertyFailure) as failed:
        check()  # type: ignore[operator]
    return failed.value


@pytest.mark.parametrize(("actual", "exact", "budget", "expected"), [
    (3.5, Fraction(1, 2), 2.0**-50, Element("grads['x'][1]", "3.5", "1/2", "3",
                                            "8.881784197001252e-16")),
    (float("nan"), Fraction(1, 3), 0.25, Element("grads['x'][1]", "nan", "1/3", "nan", "0.25")),
    (float("-inf"), Fraction(10) ** 400, 1e300, Element(
        "grads['x'][1]", "-inf", "1.0e+400", "inf", "1e+300")),
])
def test_a_budget_check_records_the_element_its_message_names(
        actual: float, exact: Fraction, budget: float, expected: Element) -> None:
    for name in ("numpy", "odd = name, spec = 1 " + HOSTILE):
        failure = _raised(lambda name=name: Context(name, linear_block_request()).within(
            "grads['x']", np.array([1.0, actual]), np.array([Fraction(1), exact], dtype=object),
            np.array([budget, budget])))
        assert failure.element == expected, \
            f"within({actual}, {exact}, {budget}) on {name!r} recorded {failure.element}, " \
            f"expected {expected}"
        assert str(failure).startswith(f"grads['x'][1]: backend {name} = {expected.backend}, "
                                       f"spec = {expected.expected}, |diff| = {expected.diff}"
                                       f" > budget {expected.budget}"), str(failure)


def test_an_equality_check_records_its_side_its_diff_and_a_zero_budget() -> None:
    failure = _raised(lambda: Context("b", linear_block_request()).equal(
        "grads['x']", np.array([4.0, 1.0]), np.array([3, 1], dtype=object), "x"))
    assert failure.element == Element("grads['x'][0]", "4.0", "3 (x)", "1", "0"), \
        failure.element


def test_a_finite_difference_check_records_its_tolerance() -> None:
    class Off:
        """numpy, with every gradient one too large."""

        def __init__(self) -> None:
            from resverify.impl.numpy_backend import NumpyBackend

            self.inner = NumpyBackend()
            self.name, self.capabilities = "off", self.inner.capabilities

        def run(self, request: object) -> object:
            from resverify.spec.request import Value

            result = self.inner.run(request)  # type: ignore[arg-type]
            assert isinstance(result, Value)
            return Value(result.output, {k: v + 1 for k, v in result.grads.items()})

    failure = _raised(lambda: check_finite_differences(
        Off(), linear_block_request(), [("x", 0)]))  # type: ignore[arg-type]
    element = failure.element
    assert element is not None and (element.element, element.backend, element.expected,
                                    element.diff) == (
        "grads['x'][0]", "1.5", "1/2 (spec central difference (h=2**-60))", "1"), element
    assert f"|diff| > tolerance {element.budget}" in str(failure), (str(failure), element)
