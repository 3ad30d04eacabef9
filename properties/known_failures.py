"""Known failures, pinned: a file in the user's repository that turns a known deviation of a
backend into an ``expected`` failure, and a deviation that went away into a ``fixed`` one.

Why pinned to a vector: a failure that is only "allowed" is forgotten; one that must
reproduce on its saved vector on every run is tracked. ``resverify check`` reads the file
given by ``--known-failures FILE``, else :data:`DEFAULT_FILE` in the working directory when
it exists (TOML, or JSON when the name ends in ``.json``; the schema is
``spec/schema/known-failures.schema.json``). Each entry names a backend, a property with
its saved vector (or a claim), and a reason. For each entry, on each run:

* its vector is judged on its backend (:func:`resverify.properties.judge.judge`, the one
  comparison rule): still failing, the entry is ``expected``; passing now, it is ``fixed``,
  and a fixed entry fails the run until it is removed (strict); an entry whose backend is
  not part of the run is ``unjudged``;
* a failed property test is ``expected`` when an expected entry names its backend, property
  and dtype, and every failure of the test has the entry's kind (default ``law``): a crash
  is never hidden by a known wrong value. Any other failure fails the run as before.
* a claim entry is ``expected`` when the claim fails on that backend, ``fixed`` when it passes.

A law that relates several answers (the sample variance identity reads the merge's output
and the branch's, from two requests) cannot be reproduced by the one request the suite
saves: its vector may instead be a *vector group* (``resverify vectors group VECTOR``
writes it: every request the law sends and the relation, :mod:`resverify.properties.groups`),
judged by :func:`resverify.properties.judge.judge_group` with the law's own rule.

This module reads the file and judges the vectors (:func:`judge_entries`), and changes
no record; the states above (``expected``, ``fixed``, ``unjudged``) and which failures
an entry expects are decided in :mod:`resverify.reports.verdicts`, with the report's other
verdicts, and the report's entries are written by :mod:`resverify.reports.json_report`.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from resverify.impl.backend import Backend
from resverify.properties.judge import Judged, expected_from_spec, judge, judge_group
from resverify.properties.relations import Group
from resverify.spec.codec import packaged_schema, parse_json, request_from_dict
from resverify.spec.errors import ResverifyError, UsageError
from resverify.spec.request import Request

__all__ = ["Checked"]

DEFAULT_FILE = Path("resverify-known-failures.toml")
Doc = dict[str, Any]


@dataclass(frozen=True)
class KnownFailure:
    """One entry of the file (``number`` counts from 1), its vector read and checked."""

    number: int
    backend: str
    reason: str
    kind: str = "law"
    prop: str | None = None
    claim: str | None = None
    vector: Path | None = None
    request: Request | None = None
    dtype: str | None = None
    group: Group | None = None

    @property
    def label(self) -> str:
        what = f"property {self.prop}" if self.prop else f"claim {self.claim}"
        return f"entry {self.number} (backend {self.backend}, {what})"


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema of a known-failures file."""
    return packaged_schema("resverify.spec", "known-failures.schema.json")


def find_file(option: Path | None, cwd: Path | None = None) -> Path | None:
    """The file to read: ``option``, else :data:`DEFAULT_FILE` in ``cwd`` when it exists."""
    if option is not None:
        return option
    default = (cwd or Path.cwd()) / DEFAULT_FILE
    return default if default.is_file() else None


def _text(path: Path, what: str) -> str:
    """``path``'s text; a UsageError ``what: reason`` where it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"{what}: {reason}") from None


def _read(path: Path) -> Any:
    text = _text(path, f"cannot read known failures {str(path)!r}")
    try:
        return json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"known failures {str(path)!r}: not valid "
                         f"{'JSON' if path.suffix == '.json' else 'TOML'}: "
                         f"{' '.join(str(exc).split())}") from None


def _validate(doc: Any, path: Path) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is None:
        return
    where = list(error.absolute_path)
    entry = f"entry {where[1] + 1}" if where[:1] == ["failure"] and len(where) > 1 else "top level"
    field = f" field {where[2]!r}" if len(where) > 2 else ""
    said = " ".join(error.message.split())[:300]
    if error.validator == "oneOf":
        said = _which(error.instance)
    raise UsageError(f"known failures {str(path)!r}: {entry}{field}: {said}")


def _which(entry: Any) -> str:
    """What an entry that is neither a property entry nor a claim entry lacks or mixes."""
    given = set(entry) if isinstance(entry, dict) else set()
    if "claim" in given and given & {"property", "vector", "dtype"}:
        return "a claim entry takes no property, vector or dtype"
    if "property" in given:
        return "a property entry needs the vector that shows the failure"
    if "vector" in given:
        return "a vector needs the property it fails"
    return "give a property and its vector, or a claim"


def _vector(path: Path, number: int, raw: Mapping[str, Any],
            base: Path) -> tuple[Path, Request | Group]:
    where = f"known failures {str(path)!r}: entry {number}"
    vector = base / str(raw["vector"])
    text = _text(vector, f"{where}: cannot read vector {str(vector)!r}")
    try:
        doc = parse_json(text)
        if isinstance(doc, dict) and doc.get("kind") == "group":
            from resverify.properties.corpus import load_group

            return vector, load_group(vector)
        if isinstance(doc, dict):
            doc.pop("vector", None)
        return vector, request_from_dict(doc)
    except ResverifyError as exc:
        raise UsageError(f"{where}: vector {str(vector)!r} is not a valid request: "
                         f"{' '.join(str(exc).split())}") from None


def load(path: Path) -> list[KnownFailure]:
    """Every entry of the known-failures file ``path``; a one-line :class:`UsageError`
    naming the file and the entry for anything wrong (unreadable, invalid, bad vector)."""
    doc = _read(path)
    _validate(doc, path)
    entries = []
    for number, raw in enumerate(doc["failure"], start=1):
        vector, found = (None, None)
        if "vector" in raw:
            vector, found = _vector(path, number, raw, path.parent)
        request = found if isinstance(found, Request) else None
        group = found if isinstance(found, Group) else None
        first = group.requests[0] if group is not None else request
        dtype = raw.get("dtype") or (first.dtype if first is not None else None)
        entries.append(KnownFailure(number, raw["backend"], raw["reason"],
                                    raw.get("kind", "law"), raw.get("property"),
                                    raw.get("claim"), vector, request, dtype, group))
    return entries


def _backend(name: str, named: Mapping[str, Backend]) -> Backend | None:
    """The backend an entry names: as given on the command line, or by its own name."""
    return named.get(name) or next((b for b in named.values() if b.name == name), None)


@dataclass(frozen=True)
class Checked:
    """A known-failures entry as this run found it: ``backend``, the name of the run's
    backend the entry names (None: that backend is not part of the run), and ``judged``,
    its vector or vector group judged on that backend (None: not judged; a claim entry is
    settled from the run's claims instead)."""

    entry: KnownFailure
    backend: str | None = None
    judged: Judged | None = None


def judge_entries(entries: Sequence[KnownFailure],
                  named: Mapping[str, Backend]) -> list[Checked]:
    """Each entry with its vector (or vector group) judged on the backend it names, when
    that backend is part of the run; the state this gives the entry (``expected``,
    ``fixed``, ``unjudged``) is :mod:`resverify.reports.verdicts`' to decide."""
    checked = []
    for entry in entries:
        backend = _backend(entry.backend, named)
        judged = None
        if backend is not None and (entry.request is not None or entry.group is not None):
            judged = _judged(backend, entry)
        checked.append(Checked(entry, None if backend is None else backend.name, judged))
    return checked


def _judged(backend: Backend, entry: KnownFailure) -> Judged:
    """The entry's vector (or vector group) judged on ``backend``."""
    if entry.group is not None:
        return judge_group(backend, entry.group)
    assert entry.request is not None
    return judge(backend, entry.request, expected_from_spec(entry.request))


