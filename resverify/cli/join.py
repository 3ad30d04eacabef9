"""``resverify join REPORT.json[=LABEL]... [--report-dir DIR]``: one report from the runs of
several machines.

Each argument is a ``report.json`` written by ``resverify check`` (or ``blocks check``) on
one machine, with the label its columns carry after ``=`` (default: its platform; see
:func:`resverify.reports.join.default_labels`). The joined ``report.json``, ``report.md``
and ``report.html`` go into ``--report-dir`` (default ``resverify-report/joined``); the
Markdown is appended to ``$GITHUB_STEP_SUMMARY`` when that is set, as ``check`` does. The
joining itself is :func:`resverify.reports.join.join`, pure; this module reads the
arguments and writes the files.

Exit 0 when the joined status is ``pass``, 1 otherwise (a machine's run failed, checked
nothing or did not finish); 2 with one line for an input that is not a complete report of
this schema version, or runs that disagree about the claims' catalog.
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "join"
HELP = ("join the report.json files of runs on several machines into one report, a column "
        "per machine, backend and dtype")
DEFAULT_REPORT_DIR = Path("resverify-report") / "joined"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json[=LABEL]",
                        help="a run's report.json, and after = the label of the machine it "
                        "ran on (default: its platform, e.g. Linux-6.1.0-x86_64-with-glibc2.36)")
    parser.add_argument("--report-dir", type=Path, default=DEFAULT_REPORT_DIR,
                        help="folder for the joined report.json/.md/.html "
                        f"(default ./{DEFAULT_REPORT_DIR})")


def _split(arg: str) -> tuple[Path, str | None]:
    """``PATH=LABEL`` into its path and label; an argument naming an existing file, or
    without ``=``, is a path alone."""
    if "=" not in arg or Path(arg).is_file():
        return Path(arg), None
    path, label = arg.rsplit("=", 1)
    return Path(path), label


def run(args: argparse.Namespace) -> int:
    from resverify.reports import join
    from resverify.reports.atomic import write_text
    from resverify.reports.html import render_joined_html
    from resverify.reports.json_report import write_report
    from resverify.reports.markdown import append_step_summary, render_joined_markdown
    from resverify.spec.errors import UsageError

    given = [_split(arg) for arg in args.reports]
    reports = [join.read_run(path) for path, _ in given]
    labels = join.default_labels(reports, [label for _, label in given])
    runs = [join.Run(label, str(path), report)
            for label, (path, _), report in zip(labels, given, reports, strict=True)]
    join.check_catalogs(runs)
    doc = join.join(runs)
    folder = args.report_dir
    markdown = render_joined_markdown(doc)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_report(folder / "report.json", doc)
        write_text(folder / "report.md", markdown)
        write_text(folder / "report.html", render_joined_html(doc))
    except OSError as exc:
        raise UsageError(f"cannot write the joined report into {str(folder)!r}: "
                         f"{exc.strerror or exc}") from None
    append_step_summary(markdown)
    for machine in doc["machines"]:
        backends = ", ".join(b["name"] for b in machine["report"]["backends"]) or "blocks"
        print(f"{machine['label']}: {machine['status']} ({backends}; {machine['file']})")
    print(f"joined {len(runs)} runs: {doc['status']}; report in {folder}/")
    return 0 if doc["status"] == "pass" else 1
