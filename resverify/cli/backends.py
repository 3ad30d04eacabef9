"""``resverify backends``: every backend name, what it claims, and whether it can run here.

A conformance run is only as broad as the backends installed, so this is the first thing
to look at: each built-in adapter and each plug-in (an installed distribution's entry in
the ``resverify.backends`` group) with its dtypes, ops and device, whether its library is
installed, the library's version, and the extra that installs it. Listing must stay
instant, so a built-in's library is looked up with ``importlib.util.find_spec`` and
``importlib.metadata`` and never imported (torch and TensorFlow take seconds); a plug-in's
module is imported, since only it knows what it claims, but the plug-in is not created.

A ``cmd:`` engine claims nothing until it runs, so it is listed only when asked for with
``--probe cmd:COMMAND``: the engine is started, greeted with the protocol's hello, and
stopped (its whole process group killed) as soon as it has answered; its row shows what
the hello claimed (modes, dtypes, ops, device), its version and its ``about`` settings.
The hello has the protocol's start limit (30 s, or ``RESVERIFY_CMD_TIMEOUT`` when that is
longer); an engine that cannot be started or gives no valid hello in time is a usage
error, one line and exit status 2, since the user named it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from resverify.impl import Capabilities
from resverify.impl.about import cmd_about, distribution_version
from resverify.impl.registry import BUILTINS, Builtin, load_plugin, plugins
from resverify.spec.errors import UsageError
from resverify.spec.ir import OPS

NAME = "backends"
HELP = "list every backend (built-in and plug-in), what it claims and whether it is installed"

COLUMNS = ("name", "kind", "library", "version", "installed", "device", "dtypes", "ops",
           "modes")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print a JSON list instead")
    shown.add_argument(
        "--names", action="store_true",
        help="print only the names of the installed backends, one a line (for scripts: "
             "make matrix checks each of them)")
    parser.add_argument("--device", help="only the backends that run on this device (cpu, cuda)")
    parser.add_argument(
        "--probe", action="append", default=[], metavar="cmd:COMMAND",
        help="also start this external engine, read what its hello claims, stop it and list "
             "it (repeatable); an engine that fails to start or to answer within the "
             "hello's limit (30 s, or RESVERIFY_CMD_TIMEOUT when longer) is an error")


def run(args: argparse.Namespace) -> int:
    rows = [builtin_row(b) for b in BUILTINS.values()]
    rows += [plugin_row(name, entry) for name, entry in sorted(plugins().items())]
    rows += [probe_row(spec) for spec in args.probe]
    if args.device is not None:
        rows = [row for row in rows if row["device"] == args.device]
    if args.names:
        print("\n".join(row["name"] for row in rows
                        if row["installed"] and not row["note"].startswith("shadowed")))
    else:
        print(json.dumps(rows, indent=2) if args.json else table(rows))
    return 0


def builtin_row(builtin: Builtin) -> dict[str, Any]:
    missing = builtin.missing()
    return {
        "name": builtin.name, "kind": "built-in", "library": builtin.distribution,
        "version": distribution_version(builtin.distribution)
        if missing is None or "PATH" in missing else None,
        "installed": missing is None, "note": missing or "",
        "install": None if builtin.extra is None else f"pip install 'resverify[{builtin.extra}]'",
        **claims(builtin.capabilities),
    }


def plugin_row(name: str, entry: Any) -> dict[str, Any]:
    dist = entry.dist
    row: dict[str, Any] = {
        "name": name, "kind": "plug-in", "library": dist.name if dist else "unknown",
        "version": dist.version if dist else None, "installed": True, "note": "",
        "install": None, "entry_point": entry.value,
        "device": None, "dtypes": None, "ops": None, "modes": None,
    }
    if name in BUILTINS:
        row["note"] = f"shadowed by the built-in {name!r}"
    try:
        capabilities = getattr(load_plugin(entry), "capabilities", None)
    except UsageError as exc:
        row.update(installed=False, note=str(exc))
        return row
    if isinstance(capabilities, Capabilities):
        row.update(claims(capabilities))
    else:
        row["note"] = row["note"] or "capabilities are declared when the backend is made"
    return row


def probe_row(spec: str) -> dict[str, Any]:
    """A ``cmd:`` engine's row, from its answer to the hello; the engine is stopped at once."""
    if not spec.startswith("cmd:"):
        raise UsageError(f"--probe takes cmd:COMMAND (an external engine), got {spec!r}")
    from resverify.impl.external import ExternalBackend  # only when probing

    engine = ExternalBackend(spec.removeprefix("cmd:"))
    engine.close()
    named = {} if engine.name == spec else {"name": engine.name}
    told = [f"{key}={value}" for key, value in {**named, **engine.told}.items()]
    return {
        "name": spec, "kind": "cmd", "library": cmd_about(engine)["library"],
        "version": engine.version, "installed": True,
        "note": "hello: " + "; ".join(told) if told else "",
        "install": None, "engine_name": engine.name, "about": engine.told,
        **claims(engine.capabilities),
    }


def claims(capabilities: Capabilities) -> dict[str, Any]:
    return {"device": capabilities.device, "dtypes": list(capabilities.dtypes),
            "ops": sorted(capabilities.ops), "modes": list(capabilities.modes)}


def table(rows: list[dict[str, Any]]) -> str:
    """Aligned text columns, one backend a line, then each note on its own line."""
    cells = [[cell(row, c) for c in COLUMNS] for row in rows]
    widths = [max(len(x) for x in column) for column in zip(COLUMNS, *cells, strict=True)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
             for line in [list(COLUMNS), *cells]]
    notes = [f"{row['name']}: {row['note']}" for row in rows if row["note"]]
    return "\n".join(lines + (["", *notes] if notes else []))


def cell(row: dict[str, Any], column: str) -> str:
    value = row[column]
    if column == "installed":
        return "yes" if value else "no"
    if column == "ops" and value is not None and set(value) == set(OPS):
        return "all"
    if isinstance(value, list):
        return ",".join(value)
    return "-" if value is None else str(value)
