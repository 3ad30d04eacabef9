"""The property suite against every mutant of the catalog, scored (``make mutants``).

A mutant (:mod:`tests.mutants`) is the reference backend with one planted bug. This tool
runs the whole suite against each (one child pytest per mutant, ``-n`` at a time, each
stopped at its first failure; :mod:`tools.mutant_runs`), prints ``killed/total`` and a
table (mutant, class, the property that killed it first, examples run until the kill,
time), and writes the same as JSON (``--out``) and as a standalone HTML page (``--html``,
in report.html's style). The runner, the verdict on a mutant and the page live here and in
:mod:`tools.mutant_runs`, never in the installed package. A surviving mutant is a
bug the suite does not catch: exit 1. The catalog's foils (the broken backends that pin
one law each) are scored too with ``--foils``; ``--only`` takes a foil as well as a
mutant. It measures resverify itself, so it is not installed:

    .venv/bin/python tools/mutants.py -n 2 --out mutants.json --html mutants.html
    .venv/bin/python tools/mutants.py --only AlphaSquared    # one mutant (repeatable)
    .venv/bin/python tools/mutants.py --foils --list         # the foils too
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools.*, tests.* as a script

from resverify.reports.html import esc, page
from resverify.spec.errors import UsageError
from tools.command import run_tool

__all__ = ["HELP", "add_arguments", "main", "render_page", "render_section", "render_table",
           "run", "score_document", "score_status"]

HELP = "run the property suite against the catalog of deliberately wrong backends"
MODULE = "tests.mutants"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="ci",
                        help="Hypothesis profile: ci (default; seeded), dev, thorough, extremes")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    parser.add_argument("-n", "--numprocesses", type=int, default=1, metavar="N",
                        help="mutants checked at once, one pytest each (default 1)")
    parser.add_argument("--only", action="append", metavar="MUTANT",
                        help="check only this mutant (class name or name), repeatable")
    parser.add_argument("--foils", action="store_true",
                        help="the catalog's foils too, after the scored mutants")
    parser.add_argument("--list", action="store_true", help="list the catalog and exit")
    parser.add_argument("--out", type=Path, metavar="PATH", help="write the scores as JSON")
    parser.add_argument("--html", type=Path, metavar="PATH",
                        help="write the scores as an HTML page")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                        help="time limit of one property test (default 300)")


def _catalog(only: list[str] | None, foils: bool = False) -> list[Any]:
    from tests import mutants

    if only:
        return mutants.by_name(only)
    return list(mutants.ENTRIES if foils else mutants.CATALOG)


def _check(args: argparse.Namespace) -> None:
    from resverify.properties.profiles import PROFILES

    if args.profile not in PROFILES:
        raise UsageError(f"unknown profile {args.profile!r}; use one of {sorted(PROFILES)}")
    if args.numprocesses < 1:
        raise UsageError(f"-n needs at least 1 process, got {args.numprocesses}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout needs a positive number of seconds, got {args.timeout}")
    for path in (args.out, args.html):
        if path is not None and not path.resolve().parent.is_dir():
            raise UsageError(f"cannot write {str(path)!r}: its folder does not exist")


def score_document(entries: list[dict[str, Any]], profile: str, seed: int,
                   seconds: float) -> dict[str, Any]:
    """The JSON document: run settings, ``killed``, ``total``, ``score`` and each mutant."""
    killed = sum(e["status"] == "killed" for e in entries)
    return {"profile": profile, "seed": seed, "killed": killed, "total": len(entries),
            "score": round(killed / len(entries), 4) if entries else None,
            "seconds": round(seconds, 2), "mutants": entries}


def _killer(entry: dict[str, Any]) -> str:
    if entry["status"] != "killed":
        return entry["status"].upper()
    dtype = f"[{entry['dtype']}]" if entry.get("dtype") else ""
    return f"{entry['property']}{dtype} ({entry['kind']})"


def render_table(doc: dict[str, Any]) -> str:
    """The text table: one row per mutant, then the score line."""
    rows = [("mutant", "class", "killed by", "examples", "time")]
    rows += [(e["mutant"], e["bug_class"], _killer(e), str(e["examples"]), f"{e['seconds']:.1f}s")
             for e in doc["mutants"]]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[4]
             for r in rows]
    lines.append(f"{doc['killed']}/{doc['total']} mutants killed "
                 f"({doc['profile']} profile, seed {doc['seed']}, {doc['seconds']:.0f}s)")
    return "\n".join(lines)


def _entry(mutant: Any, result: dict[str, Any]) -> dict[str, Any]:
    from tests.mutants import bug

    return {"mutant": mutant.__name__, "name": mutant.name,
            "bug_class": mutant.bug_class or "foil", "bug": bug(mutant), **result}


def _list(foils: bool) -> int:
    from tests.mutants import CATALOG, FOILS, bug

    shown = [*CATALOG, *FOILS] if foils else CATALOG
    for mutant in shown:
        print(f"{mutant.__name__:<30} {mutant.bug_class or 'foil':<22} {bug(mutant)}")
    print(f"{len(CATALOG)} mutants" + (f", {len(FOILS)} foils" if foils else ""))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args.foils)
    _check(args)
    from tools.mutant_runs import MutantRun, run_mutants

    chosen = _catalog(args.only, args.foils)
    settings = MutantRun(profile=args.profile, seed=args.seed, processes=args.numprocesses,
                         timeout=args.timeout)
    targets = {f"{MODULE}:{m.__name__}": m for m in chosen}
    began = time.monotonic()

    def said(target: str, result: dict[str, Any]) -> None:
        print(f"  {targets[target].__name__}: {result['status']}", file=sys.stderr, flush=True)

    results = run_mutants(list(targets), settings, on_done=said)
    entries = [_entry(m, results[t]) for t, m in targets.items()]
    doc = score_document(entries, args.profile, args.seed, time.monotonic() - began)
    print(render_table(doc))
    _write(args, doc)
    return 0 if doc["killed"] == doc["total"] else 1


def _write(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    from resverify.reports.atomic import write_text

    if args.out is not None:
        write_text(args.out, json.dumps(doc, indent=2) + "\n")
    if args.html is not None:
        write_text(args.html, render_page(doc))


def score_status(killed: int, total: int) -> str:
    """A mutant score passes only when every mutant was killed (``pass``, else ``fail``:
    the report's words, and its page's colours)."""
    return "pass" if killed == total else "fail"


_MUTANT_HEADERS = ("mutant", "class", "bug", "killed by", "kind", "examples", "time")


def _mutant_killer(entry: Mapping[str, Any]) -> str:
    if entry["status"] != "killed":
        return f'<td class="fail nw">{esc(entry["status"])}</td>'
    dtype = f" [{entry['dtype']}]" if entry.get("dtype") else ""
    title = esc(entry.get("message") or "")
    return f'<td class="pass" title="{title}">{esc(entry["property"])}{esc(dtype)}</td>'


def _mutant_row(entry: Mapping[str, Any]) -> str:
    cells = [f'<td class="nw">{esc(entry["mutant"])}</td>', f"<td>{esc(entry['bug_class'])}</td>",
             f"<td>{esc(entry['bug'])}</td>", _mutant_killer(entry),
             f"<td>{esc(entry.get('kind') or '')}</td>", f"<td>{esc(entry['examples'])}</td>",
             f'<td class="timing nw">{esc(entry["seconds"])} s</td>']
    return "<tr>" + "".join(cells) + "</tr>"


def render_section(doc: Mapping[str, Any]) -> str:
    """``<h2>Mutants</h2>``, the score line and the table of a mutant score document (the
    JSON of ``--out``): one row per mutant, with its class, bug, the property that killed
    it first, kind, examples run until the kill and time."""
    badge = score_status(doc["killed"], doc["total"])
    head = "".join(f"<th>{esc(h)}</th>" for h in _MUTANT_HEADERS)
    rows = "".join(_mutant_row(e) for e in doc["mutants"])
    return (f'<h2 id="mutants">Mutants</h2><p><span class="badge {badge}">'
            f"{esc(doc['killed'])}/{esc(doc['total'])} killed</span> "
            f"deliberately wrong backends, suite run under the {esc(doc['profile'])} profile, "
            f"seed {esc(doc['seed'])}; a survivor is a bug the suite does not catch.</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")


def render_page(doc: Mapping[str, Any]) -> str:
    """The scores as a self-contained page (report.html's style and content policy): the
    score line and the table of :func:`render_section` under a heading of its own."""
    return page("resverify mutants", f"<h1>resverify mutants</h1>{render_section(doc)}")


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("tools/mutants.py", HELP, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
