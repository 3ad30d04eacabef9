"""Imports flow one way: ``spec`` ← ``impl`` ← ``properties`` ← ``blocks`` ← ``reports`` ←
``cli`` (DESIGN.md), and no module of the library imports itself back through others.

The graph is read from the source with :mod:`ast` (every ``import`` and ``from … import``,
at a module's top or inside a function, ``TYPE_CHECKING`` blocks included: a type is a
dependency too), over every module of ``resverify/`` with the links to the four top-level
folders followed, so what the wheel installs is what is checked.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping, Set
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "resverify"
LAYERS = ("spec", "impl", "properties", "blocks", "reports", "cli")
"""The packages, lowest first: each may import those before it, never one after it."""


def library_modules() -> dict[str, Path]:
    """Every module of the library by its dotted name (``resverify.reports.html``)."""
    found: dict[str, Path] = {}
    for layer in LAYERS:
        for folder, _, files in os.walk(ROOT / layer, followlinks=True):
            for name in (f for f in files if f.endswith(".py")):
                path = Path(folder, name)
                parts = path.relative_to(ROOT).with_suffix("").parts
                dotted = ".".join(("resverify", *parts)).removesuffix(".__init__")
                found[dotted] = path
    return found


def imported_names(path: Path) -> set[str]:
    """Every absolute name ``path`` imports: ``import a.b`` gives ``a.b``, ``from a import
    b`` gives ``a`` and ``a.b``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """Each library module -> the library modules it imports (a package's ``__init__`` is
    the package's own name)."""
    modules = library_modules()
    return {name: {n for n in imported_names(path) if n in modules and n != name}
            for name, path in modules.items()}


def layer(module: str) -> int:
    return LAYERS.index(module.split(".")[1])


def upward(graph: Mapping[str, Set[str]]) -> list[str]:
    """Every import of a later layer by an earlier one, as ``importer -> imported``."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if layer(b) > layer(a))


def circle(graph: Mapping[str, Set[str]]) -> list[str] | None:
    """A path of modules that leads back to its start, or None when the graph has none."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name):], name]
        if name in done:
            return None
        for imported in sorted(graph.get(name, ())):
            found = visit(imported, [*path, name])
            if found is not None:
                return found
        done.add(name)
        return None

    return next((c for c in (visit(n, []) for n in sorted(graph)) if c is not None), None)


def test_circle_finder_finds_a_circle_and_only_a_circle() -> None:
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_layer_check_finds_an_upward_import_and_only_that() -> None:
    graph = {"resverify.spec.ir": {"resverify.reports.html"},
             "resverify.reports.html": {"resverify.spec.ir", "resverify.properties.judge"}}
    assert upward(graph) == ["resverify.spec.ir -> resverify.reports.html"]


def test_the_graph_is_read_from_every_package_and_sees_their_imports() -> None:
    graph = import_graph()
    assert {m.split(".")[1] for m in graph} == set(LAYERS), sorted(graph)[:5]
    assert "resverify.properties.corpus" in graph["resverify.cli.vectors"]  # a lazy import
    assert "resverify.reports.verdicts" in graph["resverify.reports.json_report"]


def test_imports_follow_the_layer_order() -> None:
    """spec ← impl ← properties ← blocks ← reports ← cli: the drivers of laws live in
    properties/ and decide no status; reports/ never drives a law; nothing imports the CLI
    but the CLI."""
    said = upward(import_graph())
    assert said == [], "imports against the layer order (importer -> imported):\n" + \
        "\n".join(said)


def module_graph() -> dict[str, set[str]]:
    """:func:`import_graph` between modules: an import of a package's ``__init__`` (its
    public names, such as ``from resverify.spec import UsageError``) is not an edge, since
    a package's facade re-exports its own modules by design."""
    packages = {name for name, path in library_modules().items() if path.name == "__init__.py"}
    return {name: targets - packages for name, targets in import_graph().items()}


def test_no_module_of_the_library_imports_itself_back() -> None:
    """reports/blocks.py is data the writers render and writes nothing itself (the one
    writer is reports/writer.py), so no circle runs through the report writers; in
    blocks/, the adapters answer the laws' questions and never call the driver
    (blocks/check.py), which imports them."""
    graph = module_graph()
    assert circle(graph) is None, f"import circle: {' -> '.join(circle(graph) or [])}"
