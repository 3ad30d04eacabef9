"""``resverify claims``: check every claim of the seed documents, exactly and on a backend.

The catalog and its exact checks live in :mod:`spec.claims`; this command supplies the
backend (``--backend``, default ``numpy``) for the claims about an implementation, prints a
table (id, source, status) or, with ``--json``, ``{"claims": [...]}``, and exits 1 when any
claim fails. :func:`collect_claims` gives the same entries to the report writer.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from impl import resolve_backend
from spec.claims import CLAIMS, check_claim, outcome_dict

__all__ = ["HELP", "NAME", "add_arguments", "collect_claims", "run"]

NAME = "claims"
HELP = "check the claims of the seed documents (exact spec, symbolic laws, a backend)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help='print {"claims": [...]} as JSON')
    parser.add_argument("--backend", default="numpy",
                        help="backend for the implementation claims: numpy (default), a "
                             "built-in name or module:attr")


def collect_claims(backend_name: str = "numpy") -> list[dict[str, Any]]:
    """Every claim checked (exactly, and on ``backend_name`` where it applies), as plain dicts."""
    backend = resolve_backend(backend_name)
    return [outcome_dict(check_claim(claim, backend.run)) for claim in CLAIMS]


def _table(entries: list[dict[str, Any]], backend: str) -> str:
    width = max(len(e["id"]) for e in entries)
    lines = [f"{'id':<{width}}  {'status':<6}  {'backend':<8}  source"]
    for e in entries:
        on_backend = e.get("backend_status") or "-"
        lines.append(f"{e['id']:<{width}}  {e['status']:<6}  {on_backend:<8}  "
                     f"{e['source']} § {e['section']}")
    failed = [e["id"] for e in entries if e["status"] != "pass"]
    lines.append(f"backend={backend} claims={len(entries)} failed={len(failed)}"
                 + (f" ({', '.join(failed)})" if failed else ""))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    entries = collect_claims(args.backend)
    if args.json:
        print(json.dumps({"claims": entries}, ensure_ascii=False, indent=2))
    else:
        print(_table(entries, args.backend))
    return 1 if any(e["status"] != "pass" for e in entries) else 0
