"""One import root: ``resverify`` is the only top-level name the distribution installs.

The repository keeps its four package folders at the top (``spec/``, ``impl/``,
``properties/``, ``reports/``); ``resverify/`` holds the root ``__init__.py``,
``py.typed``, its own subpackages (``cli/``, ``blocks/``) and links to the four folders, so
the same files import as ``resverify.spec`` and so on, whether installed editable, from the
wheel, or type-checked by mypy; no other link may be there. A user's own
``spec.py``, ``impl.py``, ``properties.py`` or ``reports/`` in the working folder, which
once made ``resverify check`` end ``incomplete``, must change nothing.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("spec", "impl", "properties", "reports")
# one cheap property test: a single test, float64, the numpy reference
CHEAP_PROPERTY = "results_have_declared_shapes_and_dtype and float64"
WHEEL_DATA = {"resverify/py.typed", "resverify/properties/suite.ini"} | {
    f"resverify/{p.relative_to(ROOT).as_posix()}" for top in ("spec", "reports")
    for p in (ROOT / top / "schema").glob("*.json")}
"""py.typed, the property suite's own pytest configuration (what ``resverify check`` runs
it under) and every JSON Schema of the protocol, the report, known failures and vectors."""


def resverify_command() -> list[str]:
    """The installed console script, as a user runs it."""
    script = shutil.which("resverify", path=str(Path(sys.executable).parent))
    assert script, f"no resverify console script beside {sys.executable}"
    return [script]


def crowd(folder: Path) -> Path:
    """``folder`` holding modules named like resverify's packages; each one fails loudly if
    anything imports it."""
    folder.mkdir(parents=True, exist_ok=True)
    shadow = "raise RuntimeError('the user\\'s own {} was imported')\n"
    for name in ("spec", "impl", "properties"):
        (folder / f"{name}.py").write_text(shadow.format(f"{name}.py"))
    (folder / "reports").mkdir()
    (folder / "reports" / "__init__.py").write_text(shadow.format("reports/"))
    (folder / "reports" / "cli.py").write_text(shadow.format("resverify/cli/main.py"))
    return folder


def run_in(folder: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k != "GITHUB_STEP_SUMMARY" and not k.startswith("RESVERIFY_")}
    return subprocess.run([*resverify_command(), *args], cwd=folder, env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)


def link_problems(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """What is wrong with the links of ``root / "resverify"``: each of ``packages`` must be a
    link there that resolves to the top-level folder of its name, and nothing else anywhere
    under it may be a link (the walk does not follow links, so a link's own contents are
    the top-level folder's, not resverify's)."""
    base = root / "resverify"
    problems = []
    for name in packages:
        link = base / name
        if not link.is_symlink():
            problems.append(f"resverify/{name} is not a symbolic link: check out the repository "
                            "with symbolic links enabled (git config core.symlinks true)")
        elif not link.exists():
            problems.append(f"resverify/{name} points to {os.readlink(link)}, which is missing")
        elif link.resolve() != (root / name).resolve():
            problems.append(f"resverify/{name} points to {os.readlink(link)}, not ../{name}")
    expected = {base / name for name in packages}
    for folder, subfolders, files in os.walk(base):
        for entry in [*subfolders, *files]:
            path = Path(folder) / entry
            if path.is_symlink() and path not in expected:
                problems.append(f"{path.relative_to(root).as_posix()} is a link "
                                f"(to {os.readlink(path)}); only {list(packages)} may be")
    return problems


def test_the_root_folder_links_each_package_folder_and_nothing_else() -> None:
    """``resverify/spec`` is ``spec/`` (a link), so there is one copy of every module; and
    no other link hides a second copy or a folder outside the repository."""
    problems = link_problems(ROOT)
    assert not problems, problems
    assert (ROOT / "resverify" / "py.typed").is_file(), "the py.typed marker is missing"


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    """A link that points elsewhere, a folder where a link belongs, a dangling link and a
    stray link deeper down are each named."""
    for name in ("spec", "impl", "other"):
        (tmp_path / name).mkdir()
    base = tmp_path / "resverify"
    (base / "cli").mkdir(parents=True)
    (base / "spec").symlink_to("../spec")
    (base / "impl").symlink_to("../other")
    (base / "properties").mkdir()
    (base / "reports").symlink_to("../reports")
    (base / "cli" / "shadow").symlink_to("../../other")
    assert link_problems(tmp_path) == [
        "resverify/impl points to ../other, not ../impl",
        "resverify/properties is not a symbolic link: check out the repository with symbolic "
        "links enabled (git config core.symlinks true)",
        "resverify/reports points to ../reports, which is missing",
        "resverify/cli/shadow is a link (to ../../other); only "
        "['spec', 'impl', 'properties', 'reports'] may be"], link_problems(tmp_path)


def test_every_source_folder_is_a_package_that_the_build_finds() -> None:
    """A folder of modules without ``__init__.py`` would silently drop out of the wheel."""
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=["resverify", "resverify.*"]))
    assert "resverify" in found
    for top in PACKAGES:
        for folder in [ROOT / top, *(p for p in (ROOT / top).rglob("*") if p.is_dir())]:
            if any(folder.glob("*.py")):
                name = ".".join(("resverify", *folder.relative_to(ROOT).parts))
                assert name in found, f"{name} has modules but is not packaged"


def test_only_resverify_is_importable_under_the_package_names() -> None:
    """The four packages import under ``resverify``; their bare names are not installed."""
    code = ("import importlib.util, json, sys; "
            "print(json.dumps({n: importlib.util.find_spec(n) is not None for n in sys.argv[1:]}))")
    names = [*PACKAGES, *(f"resverify.{name}" for name in PACKAGES)]
    done = subprocess.run([sys.executable, "-I", "-c", code, *names], text=True,
                          capture_output=True, check=True)
    found = json.loads(done.stdout)
    assert found == {name: name.startswith("resverify.") for name in names}, found


def test_check_ignores_same_named_modules_in_the_working_folder(tmp_path: Path) -> None:
    folder = crowd(tmp_path / "work")
    done = run_in(folder, "check", "--no-claims", "--no-plots", "--report-dir", "out", "--", "-k",
                  CHEAP_PROPERTY)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((folder / "out" / "report.json").read_text())
    assert doc["status"] == "pass", doc.get("warnings")
    assert doc["complete"] is True
    assert doc["properties"], "no property test ran"
    assert all(p["status"] == "pass" and p["examples"] > 0 for p in doc["properties"])


def test_claims_ignore_same_named_modules_in_the_working_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The crowded folder's ``resverify claims`` prints what the command prints here, in this
    process, beside no such module (one fresh interpreter, not two)."""
    from resverify.cli.main import main

    crowded = run_in(crowd(tmp_path / "work"), "claims")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    code = main(["claims"])
    clean = capsys.readouterr().out
    assert crowded.returncode == code == 0, crowded.stdout[-3000:] + crowded.stderr
    assert crowded.stdout == clean, (crowded.stdout[-1500:], clean[-1500:])
    assert re.search(r"claims=\d+ passed=\d+ failed=0 skipped=0", crowded.stdout), crowded.stdout


def test_serve_runs_as_a_module_of_resverify(tmp_path: Path) -> None:
    """``python -m resverify.impl.serve NAME`` answers a hello with its capabilities, even
    beside a user's impl.py."""
    hello = json.dumps({"resverify": 1, "kind": "hello"}) + "\n"
    done = subprocess.run([sys.executable, "-m", "resverify.impl.serve", "numpy"], input=hello,
                          cwd=crowd(tmp_path / "work"), text=True, capture_output=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["kind"] == "capabilities" and answer["name"] == "numpy", answer


def _source_copy(target: Path) -> Path:
    """The repository's sources without the venv, git data or build outputs."""
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                                    ".*_cache", ".hypothesis", "resverify-report*",
                                    "resverify-vectors")
    shutil.copytree(ROOT, target, symlinks=True, ignore=ignore)
    return target


@pytest.mark.slow  # builds the sdist and the wheel; the build's package list is checked above
def test_the_wheel_holds_only_resverify_and_its_package_data(tmp_path: Path) -> None:
    """``python -m build`` (sdist, then the wheel from it) packs every module under
    ``resverify/`` plus the two JSON schemas and ``py.typed``, and nothing else: none of
    what measures resverify itself (the mutant catalog of ``tests/mutants/``, the mutant
    runner and the benchmarks of ``tools/``, flake-run logs)."""
    pytest.importorskip("build", reason="the build frontend is in the dev extra")
    source = _source_copy(tmp_path / "src")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                           str(tmp_path / "dist"), str(source)], text=True,
                          capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        top_level = archive.read(info).decode().split()
    dist_info = {n for n in names if re.match(r"resverify-[^/]+\.dist-info/", n)}
    package = names - dist_info
    assert all(n.startswith("resverify/") for n in package), sorted(package)
    assert {n for n in package if not n.endswith(".py")} == WHEEL_DATA
    modules = {f"resverify/{p.relative_to(ROOT).as_posix()}" for top in PACKAGES
               for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts}
    own = {f"resverify/{p.relative_to(ROOT / 'resverify').as_posix()}"
           for p in (ROOT / "resverify").rglob("*.py")
           if "__pycache__" not in p.parts and p.relative_to(ROOT / "resverify").parts[0]
           not in PACKAGES}
    assert package == modules | own | WHEEL_DATA
    assert top_level == ["resverify"]
    measuring = sorted(n for n in package if re.search(r"mutant|bench|flake", n.rsplit("/")[-1]))
    assert not measuring, f"the wheel holds what measures resverify itself: {measuring}"


def _defined_names(path: Path) -> set[str]:
    """The names ``path`` defines (functions, classes, assigned names) and the command-line
    options it declares (string constants that start with ``--``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith("--"):
            names.add(node.value)
    return names


def test_the_installed_package_holds_no_mutant_runner_outcome_or_page() -> None:
    """What scores the suite against its mutants (the runner, a mutant's outcome, the score
    page, ``check --mutants``) is a tool of the repository (``tools/mutants.py``,
    ``tools/mutant_runs.py``), not part of what a user installs, nor of the report schema."""
    sources = [p for top in (*PACKAGES, "resverify") for p in (ROOT / top).rglob("*.py")
               if "__pycache__" not in p.parts]
    found = {f"{p.relative_to(ROOT)}: {name}" for p in sources for name in _defined_names(p)
             if "mutant" in name.lower()}
    assert not found, f"the package defines what measures resverify itself: {sorted(found)}"
    schema = json.loads((ROOT / "reports" / "schema" / "report.schema.json").read_text())
    assert "mutants" not in schema["properties"], sorted(schema["properties"])

