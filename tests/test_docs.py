"""Claim citations name the English section title beside the original."""

from __future__ import annotations

from resverify.reports import html, markdown

RUSSIAN = {"id": "S05", "source": "000_course.txt", "section": "Проверить предсказания",
           "section_en": "Check the predictions", "statement": "s", "expected": "1",
           "observed": "1", "exact_status": "pass", "status": "pass", "note": None,
           "backends": [{"backend": "numpy", "expected": "1", "observed": "1",
                         "status": "pass", "reason": None, "failure_kind": None}]}
ENGLISH = dict(RUSSIAN, id="S26", source="003_lecture.txt", section="Experiment",
               section_en="Experiment")
NO_SECTION = dict(RUSSIAN, id="S99", section=None, section_en=None)
CITED = "000_course.txt § Проверить предсказания (Check the predictions)"


def test_citation_shows_the_english_title_beside_the_original() -> None:
    assert markdown.citation(RUSSIAN) == CITED
    assert markdown.citation(ENGLISH) == "003_lecture.txt § Experiment"
    assert markdown.citation(NO_SECTION) == "000_course.txt"


def test_markdown_and_html_claim_tables_cite_the_english_title() -> None:
    doc = {"claims": [RUSSIAN, ENGLISH, NO_SECTION]}
    table = "\n".join(markdown._claim_table(doc["claims"]))
    assert f"| {CITED} |" in table
    assert "| 003_lecture.txt § Experiment |" in table and "(Experiment)" not in table
    page = html._claims(doc)
    assert html.esc(CITED) in page and "(Experiment)" not in page
