"""``resverify vectors export DIR``, ``resverify vectors run DIR --backend B`` and
``resverify vectors group VECTOR``.

``export`` writes the portable corpus (:mod:`resverify.properties.corpus`): every request the
property suite's laws send for their pinned examples, and every seed fixture, in each dtype,
with the exact answer and the per-element budget, plus a manifest and the JSON Schema. An
engine in any language can test itself against it without Python (``docs/vectors.md``).

``run`` checks a backend against such a folder without Hypothesis: each entry is judged by
:func:`resverify.properties.judge.judge` (the one comparison rule of the suite). It prints one
line per property and dtype that failed (its kind, the first failure's message and entry),
or for every one with ``--all``, then the counts. Exit 0 when every entry the backend claims
passed and at least one ran; 1 when one failed or none could run; 2 for a usage error (a
missing or malformed corpus).

``group`` turns a vector the suite saved for a law that relates several answers (the
sample variance identity) into a vector group: every request the law sends and the
relation, so a known-failures entry can pin that failure (``docs/known-failures.md``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NAME = "vectors"
HELP = ("export the portable corpus of exact test vectors, check a backend against one, or "
        "make a vector group from a saved vector")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    export = actions.add_parser("export", help="write the corpus into DIR (entries/, "
                                "manifest.json, vectors.schema.json)")
    export.add_argument("dir", type=Path, metavar="DIR",
                        help="an empty or new folder, or one holding an earlier corpus")
    export.add_argument("--select", action="append", default=[], metavar="TEXT",
                        help="only the properties (and seed fixtures) whose name contains "
                        "TEXT; repeatable (default: all)")
    check = actions.add_parser("run", help="check a backend against the corpus in DIR")
    check.add_argument("dir", type=Path, metavar="DIR", help="a folder written by export")
    check.add_argument("--backend", default="numpy",
                       help="a built-in backend (default numpy), module:attr or cmd:COMMAND")
    check.add_argument("--all", action="store_true",
                       help="print every property and dtype, not only those that failed")
    check.add_argument("--json", type=Path, metavar="PATH",
                       help="also write every entry's verdict to PATH as JSON")
    group = actions.add_parser("group", help="make a vector group (every request of a law "
                               "relating several answers, and the relation) from a vector "
                               "the suite saved, to pin its failure in a known-failures file")
    group.add_argument("vector", type=Path, metavar="VECTOR", help="a vector the suite saved")
    group.add_argument("--out", type=Path, metavar="PATH", required=True,
                       help="where to write the group (JSON)")
    group.add_argument("--property", metavar="NAME",
                       help="the property whose law to record (default: the vector's own)")


def run(args: argparse.Namespace) -> int:
    if args.action == "export":
        return _export(args.dir, args.select)
    if args.action == "group":
        return _group(args.vector, args.out, args.property)
    return _run(args)


def _group(vector: Path, out: Path, prop: str | None) -> int:
    from resverify.properties import corpus
    from resverify.spec.errors import UsageError

    doc = corpus.group_from_vector(vector, prop)
    try:
        out.write_text(json.dumps(doc, sort_keys=True) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {str(out)!r}: {exc.strerror or exc}") from None
    print(f"wrote a group of {len(doc['requests'])} requests ({doc['property']}, "
          f"{doc['dtype']}) to {out}")
    return 0


def _export(folder: Path, select: list[str]) -> int:
    from resverify.properties import corpus
    from resverify.spec.errors import UsageError

    if folder.exists() and any(folder.iterdir()) and not (folder / corpus.MANIFEST).is_file():
        raise UsageError(f"{str(folder)!r} is not empty and holds no corpus: export into a "
                         "new or empty folder")
    shutil.rmtree(folder / "entries", ignore_errors=True)
    try:
        manifest = corpus.export(folder, select)
    except OSError as exc:
        raise UsageError(f"cannot write the corpus into {str(folder)!r}: "
                         f"{exc.strerror or exc}") from None
    entries = manifest["entries"]
    if not entries:
        raise UsageError(f"no property or seed fixture matches --select {select}")
    families = sorted({e["family"] for e in entries})
    print(f"wrote {len(entries)} entries ({len({e['property'] for e in entries})} properties "
          f"and fixtures; families {', '.join(families)}) to {folder}/")
    return 0


def _run(args: argparse.Namespace) -> int:
    from resverify.impl import resolve_backend
    from resverify.properties import corpus
    from resverify.reports.verdicts import vector_verdict

    backend = resolve_backend(args.backend)
    try:
        judged = list(corpus.run(args.dir, backend))
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()
    verdicts = [{**_listing(entry.listing), **vector_verdict(found)} for entry, found in judged]
    # a single request replays; a group (several requests and a relation) does not
    files = {e.listing["id"]: args.dir / e.listing["file"] for e, _ in judged
             if e.listing["expect"] != "group"}
    if args.json is not None:
        args.json.write_text(json.dumps(verdicts, indent=1) + "\n", encoding="utf-8")
    _print(verdicts, backend.name, args.all, files, args.backend)
    failed = sum(v["status"] == "fail" for v in verdicts)
    passed = sum(v["status"] == "pass" for v in verdicts)
    return 1 if failed or not passed else 0


def _listing(listing: Any) -> dict[str, Any]:
    return {key: listing[key] for key in ("id", "property", "family", "dtype")}


def groups(verdicts: list[dict[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """(property, dtype) → its verdict over its entries
    (:func:`resverify.reports.verdicts.property_verdicts`)."""
    from resverify.reports.verdicts import property_verdicts

    return property_verdicts(verdicts)


def _print(verdicts: list[dict[str, Any]], name: str, show_all: bool, files: dict[str, Path],
           backend: str) -> None:
    for (prop, dtype), verdict in sorted(groups(verdicts).items()):
        if verdict["status"] == "fail":
            print(f"{prop}[{dtype}]: fail ({verdict['kind']}) in {verdict['id']}: "
                  f"{verdict['message']}")
            if verdict["id"] in files:
                print(f"  replay: resverify replay {shlex.quote(str(files[verdict['id']]))} "
                      f"--backend {shlex.quote(backend)}")
        elif show_all:
            print(f"{prop}[{dtype}]: {verdict['status']}")
    counts = {s: sum(v["status"] == s for v in verdicts) for s in ("pass", "fail", "skipped")}
    print(f"{name}: {len(verdicts)} entries, {counts['pass']} passed, {counts['fail']} failed, "
          f"{counts['skipped']} skipped (dtypes, ops or modes the backend does not claim)")
