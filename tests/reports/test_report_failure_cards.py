"""report.html's failure cards: right under the summary, the replay command and the vector
as the prominent text, and the first failing element (backend value, exact value, |diff|,
budget) inline, read from the suite's own message by :func:`failed_element`."""

from __future__ import annotations

import html
import re
from fractions import Fraction

import numpy as np
import pytest

from resverify.properties.assertions import Context, PropertyFailure
from resverify.reports.failure_card import FailedElement, failed_element
from resverify.reports.html import render_html
from resverify.spec.fixtures import linear_block_request
from tests.reports.fakes import HOSTILE
from tests.reports.test_report_html import _doc

WITHIN = ("grads['x'][0, 1]: backend off = 3.5, spec = 1/2, |diff| = 3 > budget "
          "6.106226635439023e-16 [float64] residual_add(x, linear(x, w))")


def _failing_doc(message: str = WITHIN) -> dict:
    doc = _doc()
    failed = next(p for p in doc["properties"] if p["status"] == "failed")
    failed["message"] = message
    failed["vector"] = "resverify-report/vectors/zero_branch-other-0123456789ab.json"
    failed["replay"] = ("resverify replay resverify-report/vectors/zero_branch-other-"
                        "0123456789ab.json --backend other")
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
    failed = next(p for p in doc["properties"] if p["status"] == "failed")
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


def test_a_card_whose_message_names_no_element_has_no_element_table() -> None:
    card = _section(render_html(_failing_doc("duality: " + HOSTILE), {}), "Failures")
    assert '<table class="element">' not in card, "an element table for a message without one"
    assert HOSTILE not in card, "the message reached the card unescaped"


def _within_message(actual: float, exact: Fraction, budget: float, name: str = "b") -> str:
    request = linear_block_request()
    with pytest.raises(PropertyFailure) as failed:
        Context(name, request).within("grads['x']", np.array([1.0, actual]),
                                      np.array([Fraction(1), exact], dtype=object),
                                      np.array([budget, budget]))
    return str(failed.value)


@pytest.mark.parametrize(("actual", "exact", "budget", "expected"), [
    (3.5, Fraction(1, 2), 2.0**-50, FailedElement("grads['x'][1]", "3.5", "1/2", "3",
                                                   "8.881784197001252e-16")),
    (float("nan"), Fraction(1, 3), 0.25, FailedElement("grads['x'][1]", "nan", "1/3", "nan",
                                                        "0.25")),
    (float("-inf"), Fraction(10) ** 400, 1e300, FailedElement(
        "grads['x'][1]", "-inf", "1.0e+400", "inf", "1e+300")),
])
def test_the_element_is_read_from_every_message_context_within_writes(
        actual: float, exact: Fraction, budget: float, expected: FailedElement) -> None:
    for name in ("numpy", "odd = name, spec = 1 " + HOSTILE):
        message = _within_message(actual, exact, budget, name)
        assert failed_element(message) == expected, \
            f"read {failed_element(message)} from {message!r}, expected {expected}"


def test_the_element_of_an_equality_message_gets_its_diff_and_a_zero_budget() -> None:
    message = ("grads['x'][0]: backend b = 4.0, x = 3 (must be equal, budget 0) [float16] "
               "residual_add(x, linear(x, w))")
    assert failed_element(message) == FailedElement("grads['x'][0]", "4.0", "3 (x)", "1", "0")
