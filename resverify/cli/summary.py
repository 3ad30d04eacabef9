"""The lines ``resverify check`` prints when it ends, read from the finished report.

Everything printed is in report.json already; the summary picks what a person at a
terminal needs next: the counts, how long failures shrank, the known failures that are
fixed now, why a backend had nothing checked, the warnings, the first replay commands
and where the report is. Reading the document, not the run, keeps the two from telling
different stories.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from resverify.properties.profiles import shrink_limit

__all__ = []

REPLAYS_SHOWN = 5


def print_summary(doc: Mapping[str, Any], report_dir: Path, stop: str | None,
                  suite_began: bool = True) -> None:
    """Print the summary of ``doc``; ``stop`` is the line that says the run was stopped
    (:func:`resverify.cli.evidence.stop_message`), ``suite_began`` whether pytest's
    session had started by then."""
    props, claims = doc["summary"]["properties"], doc["summary"]["claims"]
    print(f"properties: {props['pass']} pass, {props['fail']} fail, "
          f"{props['expected']} expected, {props['skipped']} skipped; claims: "
          f"{claims['pass']} pass, {claims['fail']} fail, {claims['expected']} expected")
    shrinking = shrink_summary(doc["properties"], doc["run"]["profile"])
    if shrinking is not None:
        print(shrinking)
    _print_known(doc["known_failures"], doc["summary"]["known_failures"])
    _print_unchecked(doc, stop, suite_began)
    for warning in doc["warnings"]:
        if warning != stop and not warning.startswith("not counted, it was running"):
            print(f"warning: {warning}", file=sys.stderr)
    _print_replays(doc["properties"])
    shown = os.path.relpath(report_dir) if report_dir.is_relative_to(Path.cwd()) else report_dir
    print(f"{doc['status']} (report in {shown}/report.html)")
    if stop:
        print(f"resverify: {stop} ({shown}/report.html)", file=sys.stderr)


def shrink_summary(props: Sequence[Mapping[str, Any]], profile: str) -> str | None:
    """One line on the shrinking of the failed tests: how many, for how long, how many
    examples after their first counterexamples, and the profile's cap; None if none shrank."""
    shrunk = [p for p in props if p["status"] == "fail" and p.get("failed_after") is not None]
    if not shrunk:
        return None
    seconds = sum(float(p.get("shrink_seconds") or 0.0) for p in shrunk)
    examples = sum((p["examples"] or 0) - p["failed_after"] for p in shrunk)
    limit = shrink_limit(profile)
    one = len(shrunk) == 1
    cap = (f"at most {limit}{'' if one else ' each'}" if limit is not None
           else "not capped")
    return (f"shrinking: {len(shrunk)} failed test{'' if one else 's'} shrank for "
            f"{seconds:.1f} s ({examples} examples after {'its' if one else 'their'} first "
            f"counterexample{'' if one else 's'}; {cap} under profile {profile})")


def _print_known(known: Mapping[str, Any], counts: Mapping[str, int]) -> None:
    """The known failures' tally, and one line per fixed entry (each fails the run)."""
    if known["file"] is None:
        return
    print(f"known failures ({known['file']}): {counts['expected']} expected, "
          f"{counts['fixed']} fixed, {counts['unjudged']} unjudged")
    for entry in known["entries"]:
        if entry["status"] == "fixed":
            what = entry["property"] or f"claim {entry['claim']}"
            on = f" on {entry['vector']}" if entry["vector"] else ""
            print(f"fixed: entry {entry['entry']} ({entry['backend']}, {what}) passes now{on}: "
                  f"remove it from {known['file']}")


def _print_unchecked(doc: Mapping[str, Any], stop: str | None, suite_began: bool) -> None:
    """One line per backend with nothing checked, saying why: the run was stopped first,
    or none of its tests could run on it."""
    for backend in doc["backends"]:
        if backend["status"] != "unjudged":
            continue
        ran = any(p["backend"] == backend["name"] for p in doc["properties"])
        if stop and not suite_began:
            print(f"{backend['name']}: nothing checked: interrupted before any property ran")
        elif stop and not ran:
            print(f"{backend['name']}: nothing checked: interrupted before any of its "
                  "property tests finished")
        else:
            count = len(backend["not_run"])
            print(f"{backend['name']}: nothing checked ({count} test{'s' if count != 1 else ''}"
                  " could not run on it; see report.md)")


def _print_replays(props: Sequence[Mapping[str, Any]]) -> None:
    """The replay commands of the first failures, and how many more report.md lists."""
    replays = [p["replay"] for p in props if p["status"] == "fail" and p["replay"]]
    for command in replays[:REPLAYS_SHOWN]:
        print(f"replay: {command}")
    if len(replays) > REPLAYS_SHOWN:
        print(f"... and {len(replays) - REPLAYS_SHOWN} more replay commands in report.md")
