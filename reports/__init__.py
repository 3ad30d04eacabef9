"""resverify's reports: the verdicts above the element, decided once per record
(:mod:`resverify.reports.verdicts`), and the one writer of report.json, report.md and
report.html for ``check`` and ``blocks check`` (:mod:`resverify.reports.writer`).

Public API: none to import. What this package promises is the report itself: report.json
valid against ``reports/schema/report.schema.json`` (and a joined report against
``joined-report.schema.json``), each status one word of the schema's ``$defs/status``.
Its modules' ``__all__`` name what the command line imports from them, not a promise.
"""
