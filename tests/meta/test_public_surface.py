"""A tiny public surface: each package's ``__init__`` says what is promised, and any other
module's ``__all__`` names only what another package of resverify imports from it (a seam
between layers). A name that only its own package, or only the tests, reads is private by
being absent from ``__all__``.

Read with :mod:`ast` over the modules :mod:`tests.meta.test_layers` finds (the links to the
four top-level folders followed): what the wheel installs is what is checked.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from tests.meta.test_layers import library_modules


def declared(tree: ast.Module) -> list[str]:
    """The names of a module's top-level ``__all__`` (empty when it has none)."""
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "__all__" and \
                isinstance(value, ast.List | ast.Tuple):
            return [str(e.value) for e in value.elts if isinstance(e, ast.Constant)]
    return []


def package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def unread_exports(trees: Mapping[str, tuple[ast.Module, bool]]) -> list[str]:
    """``module.name`` for each name a non-``__init__`` module exports that no module of
    another package (nor its own package's ``__init__``) imports from it. ``trees`` maps a
    dotted module name to its parsed source and whether it is an ``__init__``."""
    read: set[str] = set()
    for importer, (tree, is_init) in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.module is None or \
                    node.module not in trees:
                continue
            source = node.module
            seam = package(importer) != package(source) or (
                is_init and source.rsplit(".", 1)[0] == importer)
            if seam:
                read.update(f"{source}.{alias.name}" for alias in node.names)
    return sorted(f"{module}.{name}" for module, (tree, is_init) in trees.items()
                  if not is_init for name in declared(tree) if f"{module}.{name}" not in read)


def parsed(paths: Mapping[str, Path]) -> dict[str, tuple[ast.Module, bool]]:
    return {name: (ast.parse(path.read_text(encoding="utf-8")), path.name == "__init__.py")
            for name, path in paths.items()}


def test_every_exported_name_is_read_by_another_package() -> None:
    unread = unread_exports(parsed(library_modules()))
    assert unread == [], ("names in a module's __all__ that no other package imports (drop "
                          "them from __all__, or make them private):\n" + "\n".join(unread))


def test_the_check_finds_a_name_only_its_own_package_reads() -> None:
    trees = {
        "resverify.spec.ir": (ast.parse('__all__ = ["Program", "helper"]'), False),
        "resverify.spec.exact": (ast.parse("from resverify.spec.ir import helper"), False),
        "resverify.impl.ops": (ast.parse("from resverify.spec.ir import Program"), False),
    }
    assert unread_exports(trees) == ["resverify.spec.ir.helper"]
    trees["resverify.spec"] = (ast.parse("from resverify.spec.ir import helper"), True)
    assert unread_exports(trees) == []


def test_every_package_says_what_it_promises() -> None:
    for name, path in library_modules().items():
        if path.name == "__init__.py" and name.count(".") == 1:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            assert "Public API" in doc, f"{name}/__init__.py does not say its public API"
