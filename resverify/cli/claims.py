"""``resverify claims``: check every claim of the seed documents, exactly and on backends.

The catalog and its exact checks live in :mod:`resverify.spec.claims`; this command supplies the
backends (``--backend``, repeatable, default ``numpy``) for the claims about an
implementation. Each claim has an exact side and, per backend, that backend's side:
``pass``, ``fail``, or ``skipped`` when the check needs a request the backend does not claim
(never sent). The table shows the overall status, the exact side and each backend's side,
then the reason of every failed or skipped side; ``--json`` prints ``{"claims": [...]}``
with each backend's expected and observed values. Exit 1 when any claim fails.
:func:`collect_claims` gives the same entries to the report writer.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

from resverify.impl import Backend, resolve_backend
from resverify.reports.markdown import citation
from resverify.spec.claims import Claim, check_claim, outcome_dict

__all__ = []

NAME = "claims"
HELP = "check the claims of the seed documents (exact spec, symbolic laws, backends)"
CLAIMS: tuple[Claim, ...] | None = None
"""The claims checked; None: the whole catalog, loaded on first use (it imports SymPy)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help='print {"claims": [...]} as JSON')
    parser.add_argument("--backend", action="append", dest="backends", metavar="NAME",
                        help="backend for the implementation claims, repeatable: numpy "
                             "(default), torch, jax, autograd, module:attr or cmd:COMMAND")


def _resolve(names: str | Sequence[str]) -> list[Backend]:
    return [resolve_backend(name)
            for name in dict.fromkeys([names] if isinstance(names, str) else names)]


OnClaim = Callable[[int, int, str], None]
"""Told ``(k, total, claim id)`` as the k-th claim of ``total`` begins."""


def _check_all(backends: Sequence[Backend], on_claim: OnClaim | None = None
               ) -> list[dict[str, Any]]:
    from resverify.spec import claims  # its catalog imports SymPy: not at --help time

    catalog = claims.CLAIMS if CLAIMS is None else CLAIMS
    out = []
    for k, claim in enumerate(catalog, 1):
        if on_claim is not None:
            on_claim(k, len(catalog), claim.id)
        out.append(outcome_dict(check_claim(claim, *backends)))
    return out


def collect_claims(backend_names: str | Sequence[str] = "numpy",
                   on_claim: OnClaim | None = None) -> list[dict[str, Any]]:
    """Every claim checked exactly and on each named backend, as plain dicts
    (:func:`resverify.spec.claims.outcome_dict`); ``on_claim`` is told as each begins."""
    return _check_all(_resolve(backend_names), on_claim)


def _table(entries: list[dict[str, Any]], backends: list[str]) -> str:
    width = max(len(e["id"]) for e in entries)
    columns = [max(len(b), 7) for b in backends]
    lines = [f"{'id':<{width}}  {'status':<7}  {'exact':<5}  "
             + "".join(f"{b:<{w}}  " for b, w in zip(backends, columns, strict=True))
             + "source"]
    reasons = []
    for e in entries:
        sides = {s["backend"]: s for s in e["backends"]}
        cells = [(sides[b]["status"] if b in sides else "-") for b in backends]
        lines.append(f"{e['id']:<{width}}  {e['status']:<7}  {e['exact_status']:<5}  "
                     + "".join(f"{c:<{w}}  " for c, w in zip(cells, columns, strict=True))
                     + citation(e))
        reasons += [_reason(e["id"], s) for s in e["backends"] if s["status"] != "pass"]
    return "\n".join([*lines, *reasons, _totals(entries, backends)])


def _reason(claim: str, side: dict[str, Any]) -> str:
    """Why a claim did not pass on one backend: its status, kind and reason (or values)."""
    kind = f" ({side['failure_kind']})" if side["failure_kind"] else ""
    why = side["reason"] or _values(side)
    return f"{claim} on {side['backend']}: {side['status']}{kind}: {why}"


def _totals(entries: list[dict[str, Any]], backends: list[str]) -> str:
    """The table's last line: the backends, and the claims by status (the failed named)."""
    failed = [e["id"] for e in entries if e["status"] == "fail"]
    skipped = sum(e["status"] == "skipped" for e in entries)
    return (f"backends={','.join(backends)} claims={len(entries)} "
            f"passed={sum(e['status'] == 'pass' for e in entries)} failed={len(failed)} "
            f"skipped={skipped}" + (f" ({', '.join(failed)})" if failed else ""))


def _values(side: dict[str, Any]) -> str:
    def text(value: object) -> str:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)

    return f"expected {text(side['expected'])}, observed {text(side['observed'])}"


def run(args: argparse.Namespace) -> int:
    backends = _resolve(args.backends or ["numpy"])
    entries = _check_all(backends)
    if args.json:
        print(json.dumps({"claims": entries}, ensure_ascii=False, indent=2))
    else:
        print(_table(entries, [b.name for b in backends]))
    return 1 if any(e["status"] == "fail" for e in entries) else 0
