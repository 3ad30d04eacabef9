"""The newcomer docs act as written: the README's commands parse, the adapter guide's code
runs, the toy adapter is short and passes the property suite, claim citations name the
English section title beside the original.

The README stays short (at most :data:`README_MAX_LINES` lines) because the details live in
``docs/``; so every link it gives must lead somewhere, and the two recipes a newcomer
follows step by step (adding an op, adding a property) must name only files that exist.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from resverify.cli import main as cli
from resverify.impl import Backend, resolve_backend
from resverify.reports import html, markdown

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
README_MAX_LINES = 200
ADAPTERS = REPO / "docs" / "adapters.md"
COMMANDS_DOC = REPO / "docs" / "commands.md"
RECIPES = (REPO / "docs" / "adding-an-op.md", REPO / "docs" / "adding-a-property.md")
COMMANDS = {module.NAME for module in cli.commands()}
"""Every subcommand, each of which the README shows once and documents (``--help``)."""
TOY = REPO / "examples" / "toy_adapter.py"
TOY_BACKEND = "examples.toy_adapter:ToyBackend"
NEWCOMER_SECTIONS = ("Using resverify", "Checking your own engine")
README_PENDING: set[str] = set()
"""Commands whose README example its writer has yet to add (docs/commands.md shows them);
the README test fails once the example is there, until the name leaves this set."""


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section of a Markdown text."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no section '## {title}'"
    return match.group(1)


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def command_lines(text: str) -> list[str]:
    """Every command of the ``sh`` blocks of ``text``, comments and blank lines left out."""
    lines = [line.split("#")[0].strip() for block in code_blocks(text, "sh")
             for line in block.splitlines()]
    return [line for line in lines if line]


def resverify_argv(line: str) -> list[str] | None:
    """The arguments of a ``resverify`` command line (with an environment prefix or the
    ``.venv/bin/`` path), or None for another command."""
    words = shlex.split(line)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if not words or Path(words[0]).name != "resverify":
        return None
    return words[1:]


def parse(argv: list[str]) -> Any:
    """Parse like ``resverify`` does (a leading option means ``check``); fail on an error."""
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = [cli.DEFAULT_COMMAND, *argv]
    try:
        return cli.build_parser().parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"resverify {shlex.join(argv)}: exit {exc.code}") from None


def newcomer_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    return [line for title in NEWCOMER_SECTIONS for line in command_lines(section(text, title))]


def test_readme_commands_name_existing_subcommands_options_files_and_backends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))  # the command finds the working folder too
    commands = [*newcomer_commands(), *command_lines(ADAPTERS.read_text(encoding="utf-8")),
                *command_lines(COMMANDS_DOC.read_text(encoding="utf-8"))]
    used = set()
    for line in commands:
        argv = resverify_argv(line)
        if argv is None or argv == ["--help"]:
            continue
        args = parse(argv)
        used.add(args.command)
        for name in [*(getattr(args, "backends", None) or ()),
                     *([args.backend] if isinstance(getattr(args, "backend", None), str) else [])]:
            if ":" in name and not name.startswith("cmd:"):
                assert isinstance(resolve_backend(name), Backend), line
        for value in vars(args).values():
            if isinstance(value, Path) and value.suffix == ".json":
                assert (REPO / value).is_file(), f"{line}: no file {value}"
    assert used == COMMANDS, used ^ COMMANDS


def make_targets_shown(text: str) -> set[str]:
    """The targets of the rows ``| `make TARGET` | ...`` of a Markdown text."""
    return set(re.findall(r"^\| `make (\S+)` \|", text, re.M))


@pytest.mark.parametrize("doc", ["README.md", "docs/commands.md"])
def test_every_make_target_has_a_row_and_every_row_a_target(doc: str) -> None:
    text = (REPO / doc).read_text(encoding="utf-8")
    if doc == "README.md":
        text = section(text, "Using resverify")
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    declared = re.search(r"^\.PHONY: (.*)$", makefile, re.M)
    assert declared, "Makefile has no .PHONY line"
    phony = set(declared.group(1).split())
    shown = make_targets_shown(text)
    assert shown == phony, f"{doc}: rows {sorted(shown)}, .PHONY {sorted(phony)}"
    for target in shown:
        assert re.search(rf"^{target}:", makefile, re.M), f"{doc}: no rule for make {target}"


def test_readme_shows_one_example_per_command_and_how_to_run_it() -> None:
    text = section(README.read_text(encoding="utf-8"), "Using resverify")
    examples = [argv[0] for line in command_lines(text)
                if (argv := resverify_argv(line)) and argv[0] != "--help"]
    assert set(examples) == COMMANDS - README_PENDING, set(examples) ^ COMMANDS
    assert ". .venv/bin/activate" in text and ".venv/bin/resverify" in text


@pytest.mark.parametrize("line", ["resverify check --no-such-option",
                                  "resverify frobnicate", "resverify run"])
def test_a_command_line_that_does_not_parse_fails_the_readme_check(line: str) -> None:
    argv = resverify_argv(line)
    assert argv is not None
    with pytest.raises(AssertionError, match="exit 2"):
        parse(argv)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_of_each_documented_command_exits_zero(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([command, "--help"]) == 0
    assert f"usage: resverify {command}" in capsys.readouterr().out


def test_toy_adapter_is_under_50_lines() -> None:
    lines = TOY.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 50, f"examples/toy_adapter.py has {len(lines)} lines"


def test_toy_adapter_uses_only_the_public_packages() -> None:
    imports = re.findall(r"^from (resverify\S*) import", TOY.read_text(encoding="utf-8"), re.M)
    assert imports and set(imports) <= {"resverify.spec", "resverify.impl"}, imports


def test_adapter_guide_python_blocks_run_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    blocks = code_blocks(ADAPTERS.read_text(encoding="utf-8"), "python")
    assert len(blocks) >= 5
    namespace: dict[str, Any] = {"__name__": "adapters_md"}
    for number, block in enumerate(blocks[:-1], 1):
        try:
            exec(compile(block, f"docs/adapters.md block {number}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"docs/adapters.md python block {number} fails: {exc!r}\n"
                                 f"{block}") from exc


def test_adapter_guide_lists_the_toy_adapter_verbatim() -> None:
    listed = code_blocks(ADAPTERS.read_text(encoding="utf-8"), "python")[-1]
    assert listed == TOY.read_text(encoding="utf-8")


def test_example_request_is_the_guides_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from resverify.spec import dumps, loads_request

    monkeypatch.syspath_prepend(str(REPO))
    namespace: dict[str, Any] = {}
    blocks = code_blocks(ADAPTERS.read_text(encoding="utf-8"), "python")
    exec(compile(next(b for b in blocks if "Program(" in b), "adapters.md", "exec"), namespace)
    saved = loads_request((REPO / "examples" / "request.json").read_text(encoding="utf-8"))
    assert dumps(saved) == dumps(namespace["request"])


def mutant(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, f"the toy adapter no longer has {old!r}"
    return source.replace(old, new)


def test_toy_adapter_passes_the_property_suite_and_a_broken_twin_fails(tmp_path: Path) -> None:
    broken = mutant(TOY.read_text(encoding="utf-8"), 'name = "toy"', 'name = "toy-broken"')
    broken = mutant(broken, "[np.float64(n.alpha) * g]", "[g]")  # scale's gradient forgets α
    (tmp_path / "broken_toy.py").write_text(broken, encoding="utf-8")
    report = tmp_path / "report"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path)]))
    command = [str(Path(sys.executable).parent / "resverify"), "check", "--no-claims", "--no-plots",
               "--backend", TOY_BACKEND, "--backend", "broken_toy:ToyBackend",
               "--report-dir", str(report), "--", "-k", "shared_operand or one_plus_a"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    doc = json.loads((report / "report.json").read_text(encoding="utf-8"))
    backends = {b["name"]: b for b in doc["backends"]}
    assert backends["toy"]["status"] == "pass", backends["toy"]
    assert backends["toy-broken"]["status"] == "fail", backends["toy-broken"]
    ran = [p for p in doc["properties"] if p["status"] != "skipped"]
    toy = [p for p in ran if p["backend"] in ("toy", TOY_BACKEND)]
    assert len(toy) == 2 and all(p["status"] == "pass" and p["examples"] > 0 for p in toy), toy
    assert all(p["dtype"] == "float64" for p in ran), ran
    wrong = [p for p in ran if p not in toy]
    assert any(p["status"] == "fail" and p["failure_kind"] == "law" for p in wrong), wrong
    skipped = [p for p in doc["properties"] if p["status"] == "skipped"]
    assert skipped and all("not claimed" in (p.get("skip_reason") or "") for p in skipped), \
        skipped


RUSSIAN = {"id": "S05", "source": "000_course.txt", "section": "Проверить предсказания",
           "section_en": "Check the predictions", "statement": "s", "expected": "1",
           "observed": "1", "exact_status": "pass", "status": "pass", "note": None,
           "backends": [{"backend": "numpy", "expected": "1", "observed": "1",
                         "status": "pass", "reason": None, "failure_kind": None}]}
ENGLISH = dict(RUSSIAN, id="S26", source="003_lecture.txt", section="Experiment",
               section_en="Experiment")
NO_SECTION = dict(RUSSIAN, id="S99", section=None, section_en=None)
CITED = "000_course.txt § Проверить предсказания (Check the predictions)"


def test_citation_shows_the_english_title_beside_the_original() -> None:
    assert markdown.citation(RUSSIAN) == CITED
    assert markdown.citation(ENGLISH) == "003_lecture.txt § Experiment"
    assert markdown.citation(NO_SECTION) == "000_course.txt"


def test_markdown_and_html_claim_tables_cite_the_english_title() -> None:
    doc = {"claims": [RUSSIAN, ENGLISH, NO_SECTION]}
    table = "\n".join(markdown._claim_table(doc["claims"]))
    assert f"| {CITED} |" in table
    assert "| 003_lecture.txt § Experiment |" in table and "(Experiment)" not in table
    page = html._claims(doc)
    assert html.esc(CITED) in page and "(Experiment)" not in page


PROTOCOL = REPO / "docs" / "external-protocol.md"
OP_DOCS = {"docs/adapters.md": (ADAPTERS, "What each op must compute"),
           "docs/external-protocol.md": (PROTOCOL, "Ops")}
ZEROS_AS_VALUES = "`-0.0 == +0.0`"


def op_rows(path: Path, title: str) -> dict[str, str]:
    """The rows of the op table under the ``title`` heading (## or ###), by op name."""
    text = path.read_text(encoding="utf-8")
    match = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ |\Z)", text, re.S | re.M)
    assert match, f"{path.name}: no section {title!r}"
    return dict(re.findall(r"^\| `(\w+)` \|(.*)$", match.group(1), re.M))


@pytest.mark.parametrize("doc", sorted(OP_DOCS))
def test_op_tables_promise_no_sign_of_zero_the_suite_does_not_check(doc: str) -> None:
    path, title = OP_DOCS[doc]
    rows = op_rows(path, title)
    signed = {op: row for op, row in rows.items() if re.search(r"[+−-]0\b(?![.x])", row)}
    assert not signed, f"{doc}: rows {signed} promise a sign of zero; the suite judges values"
    assert "either sign" in rows["relu"], f"{doc}: relu row {rows['relu']!r} says nothing of -0"
    text = path.read_text(encoding="utf-8")
    assert ZEROS_AS_VALUES in text, f"{doc} does not state the convention {ZEROS_AS_VALUES}"


def listed_names(cell: str) -> list[str]:
    """The backticked names of a table cell, in order."""
    return re.findall(r"`(\w+)`", cell)


def capabilities_ops_cell(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path == ADAPTERS:
        match = re.search(r"^\| `ops` \| every op \| (.*) \|$", text, re.M)
    else:
        match = re.search(r"^\* `ops` \(required, non-empty\): any of (.*?)\.\n\* ", text,
                          re.S | re.M)
    assert match, f"{path.name}: no list of the op names a capability may claim"
    return match.group(1)


@pytest.mark.parametrize("doc", sorted(OP_DOCS))
def test_op_tables_and_capability_lists_name_every_op_of_the_ir(doc: str) -> None:
    from resverify.spec.ops import OP_TABLE

    path, title = OP_DOCS[doc]
    tabled = sorted(op_rows(path, title))
    assert tabled == sorted(OP_TABLE), \
        f"{doc}: the op table has {tabled}, the IR has {sorted(OP_TABLE)}"
    claimable = listed_names(capabilities_ops_cell(path))
    assert claimable == sorted(OP_TABLE), \
        f"{doc}: capabilities may claim {claimable}, the IR has {sorted(OP_TABLE)}"


def test_adapter_guide_gives_the_node_signature_with_every_attribute() -> None:
    import inspect

    from resverify.spec import Node

    fields = ", ".join(p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default}"
                       for p in inspect.signature(Node).parameters.values())
    signature = f"`Node({fields})`"
    text = ADAPTERS.read_text(encoding="utf-8")
    assert signature in text, f"docs/adapters.md does not give {signature}"


def test_adapter_guide_rows_of_the_norms_say_what_they_compute() -> None:
    rows = op_rows(ADAPTERS, "What each op must compute")
    for op in ("layer_norm", "rms_norm"):
        row = rows[op]
        assert "last axis" in row and "ε" in row and "mean" in row, f"{op}: {row!r}"
        value, vjp, jvp = [cell.strip() for cell in row.split("|")[1:4]]
        assert value and vjp and jvp, f"{op}: a value, gradient and tangent each, got {row!r}"


def test_adapter_guide_rounds_exact_constants_with_the_public_helper() -> None:
    import resverify.spec

    assert "round_to_dtype" in resverify.spec.__all__, "resverify.spec exports no round_to_dtype"
    blocks = code_blocks(ADAPTERS.read_text(encoding="utf-8"), "python")
    assert any("round_to_dtype(" in block for block in blocks), \
        "no python block of docs/adapters.md rounds α or ε with round_to_dtype"


def test_adapter_guide_says_the_adapter_answers_shape_errors() -> None:
    body = section(ADAPTERS.read_text(encoding="utf-8"), "Shape errors are the adapter's to answer")
    for needed in ("infer_shapes", "ResultError.mismatch", "shape_mismatch", "broadcast"):
        assert needed in body, f"the shape-error section does not mention {needed}"


def test_adapter_guide_documents_about_for_the_library_and_version() -> None:
    text = ADAPTERS.read_text(encoding="utf-8")
    table = section(text, "The `Backend` protocol")
    rows = dict(re.findall(r"^\| `(\w+)(?:\(\w*\))?` \| ([^|]*) \|", table, re.M))
    assert "about" in rows, f"the Backend table lists {sorted(rows)}, not the optional about"
    blocks = code_blocks(text, "python")
    assert any("describe_backend(" in block and "about" in block for block in blocks), \
        "no python block shows what the report records from about"


README_TERMS = ("what resverify checks", "backend", "claim", "claim catalog", "seed documents")


def readme_top() -> str:
    """The README before its first ``##`` section: what a reader meets first."""
    return README.read_text(encoding="utf-8").split("\n## ", 1)[0]


@pytest.mark.parametrize("term", README_TERMS)
def test_readme_defines_its_terms_before_the_first_section(term: str) -> None:
    top = readme_top()
    definition = re.search(rf"^[*-] \*\*{re.escape(term)}\*\*[:.,]? (.{{40,}})", top, re.M | re.I)
    assert definition, f"the README's top ({len(top.splitlines())} lines) defines no **{term}**"
    assert len(top.splitlines()) <= 40, f"the README's top runs {len(top.splitlines())} lines"


def test_readme_says_where_the_claim_catalog_lives_and_how_to_check_it() -> None:
    top = readme_top()
    for needed in ("spec/claims/", "resverify claims", "S01", "exact"):
        assert needed in top, f"the README's top does not mention {needed!r}"


def overrun(text: str, limit: int = README_MAX_LINES) -> str | None:
    """Why ``text`` is too long for the README, or None when it fits in ``limit`` lines."""
    lines = len(text.splitlines())
    return f"{lines} lines, more than {limit}" if lines > limit else None


def test_readme_is_at_most_200_lines() -> None:
    problem = overrun(README.read_text(encoding="utf-8"))
    assert problem is None, f"README.md has {problem}: move the details into docs/"


def test_the_length_check_can_fail() -> None:
    assert overrun("line\n" * README_MAX_LINES) is None
    assert overrun("line\n" * (README_MAX_LINES + 1)) == "201 lines, more than 200"


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown text: lower case, punctuation
    but ``-`` and ``_`` dropped, spaces as ``-``."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M),
                          re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in headings}


def broken_links(doc: Path, root: Path = REPO) -> list[str]:
    """Every relative link of ``doc`` (``[text](target)``, and a ``docs/*.md`` named in
    backticks, from the repository ``root``) whose file does not exist, or whose
    ``#anchor`` is no heading of it."""
    text = doc.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    named = [(root / path, path) for path in re.findall(r"`(docs/[\w./-]+\.md)`", text)]
    found = [(doc.parent / target.split("#")[0], target) for target in targets
             if not re.match(r"[a-z]+:", target) and not target.startswith("#")]
    broken = []
    for path, target in [*found, *named]:
        if not path.exists():
            broken.append(f"{target}: no file {path.relative_to(root).as_posix()}")
        elif "#" in target and path.suffix == ".md":
            anchor = target.split("#", 1)[1]
            if anchor not in anchors(path.read_text(encoding="utf-8")):
                broken.append(f"{target}: {path.name} has no heading #{anchor}")
    for target in (t for t in targets if t.startswith("#")):
        if target[1:] not in anchors(text):
            broken.append(f"{target}: {doc.name} has no heading {target}")
    return broken


LINKED_DOCS = ["README.md", "engines/c/README.md",
               *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", LINKED_DOCS)
def test_every_link_of_the_readme_and_the_docs_resolves(doc: str) -> None:
    broken = broken_links(REPO / doc)
    assert not broken, f"{doc}: broken links {broken}"


def test_the_readme_links_every_file_of_docs() -> None:
    """One line each: a document of ``docs/`` the README does not point to is not found."""
    text = README.read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)", text))
    shipped = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")} - NOT_FROM_README
    assert shipped <= linked, f"the README links no {sorted(shipped - linked)}"


NOT_FROM_README = {"docs/blocks-install.md"}
"""Documents reached from another document rather than from the README."""


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "adapters.md").write_text("# Adapters\n## Forward mode\n")
    fake = tmp_path / "docs" / "fake.md"
    fake.write_text("# Title\n[a](docs/adapters.md) [b](adapters.md#no-such-heading) "
                    "[c](#title) [d](#nowhere) [e](adapters.md#forward-mode) "
                    "[f](https://example.org/x) `docs/no-such.md` `docs/adapters.md`\n",
                    encoding="utf-8")
    assert broken_links(fake, tmp_path) == [
        "docs/adapters.md: no file docs/docs/adapters.md",
        "adapters.md#no-such-heading: adapters.md has no heading #no-such-heading",
        "docs/no-such.md: no file docs/no-such.md",
        "#nowhere: fake.md has no heading #nowhere"], broken_links(fake, tmp_path)


PATH_TOKEN = re.compile(r"[\w.<>*-]+(?:/[\w.<>*-]+)*/?")
FILE_SUFFIXES = (".py", ".md", ".json", ".c", ".toml", ".mjs", ".txt")
SKIPPED_FOLDERS = {".git", ".venv", "__pycache__", ".hypothesis", "build", "dist",
                   "resverify-report", "node_modules"}


def repository_files() -> list[str]:
    """Every file of the working tree, relative to it, outside the venv and build outputs."""
    files = []
    for folder, subfolders, names in os.walk(REPO):
        subfolders[:] = [s for s in subfolders if s not in SKIPPED_FOLDERS
                         and not s.endswith((".egg-info", "_cache"))]
        base = Path(folder).relative_to(REPO)
        files += [(base / name).as_posix() for name in names]
    return files


def named_paths(text: str) -> list[str]:
    """The repository paths a Markdown text names: backticked words with a ``/`` or a file
    suffix, and such words of its ``sh`` blocks (``.venv/`` and options left out);
    ``<op>`` and ``*`` are placeholders."""
    words = re.findall(r"`([^`\s]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
    words += [word for block in code_blocks(text, "sh") for word in shlex.split(block)]
    return [word for word in words if PATH_TOKEN.fullmatch(word) and not word.startswith(
        (".venv/", "-")) and ("/" in word or word.endswith(FILE_SUFFIXES))]


def missing_paths(text: str, files: list[str]) -> list[str]:
    """The paths of :func:`named_paths` no file of ``files`` matches: a path with a ``/``
    from the repository root, a bare file name anywhere, a placeholder as a wildcard."""
    folders = {str(Path(f).parent.as_posix()) for f in files}
    folders |= {parent.as_posix() for f in files for parent in Path(f).parents}
    missing = []
    for path in named_paths(text):
        pattern = re.sub(r"<[^>]+>", "*", path.rstrip("/"))
        if "/" not in pattern:
            pattern = f"*/{pattern}"
        candidates = folders if path.endswith("/") else {*files, *folders}
        if not any(fnmatch.fnmatchcase(c, pattern) or fnmatch.fnmatchcase(f"./{c}", pattern)
                   for c in candidates):
            missing.append(path)
    return missing


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_path_a_recipe_names_exists(recipe: Path) -> None:
    text = recipe.read_text(encoding="utf-8")
    assert len(named_paths(text)) >= 20, f"{recipe.name} names {named_paths(text)}"
    missing = missing_paths(text, repository_files())
    assert not missing, f"{recipe.name} names files that do not exist: {missing}"


def test_the_path_check_can_fail() -> None:
    files = ["spec/ops/sigmoid.py", "spec/ops/__init__.py", "tests/spec/test_ops.py"]
    text = ("`spec/ops/<op>.py`, `spec/ops/` and `test_ops.py`; `spce/ops/sigmoid.py`, "
            "`spec/ops/gelu.py`, `spec/ops/sigmoid.py/`, `nothing.py`, `tests/<x>/test_y.py`\n"
            "```sh\npytest -q tests/spec/test_ops.py tests/spec/test_gone.py\n```\n")
    assert missing_paths(text, files) == ["spce/ops/sigmoid.py", "spec/ops/gelu.py",
                                          "spec/ops/sigmoid.py/", "nothing.py",
                                          "tests/<x>/test_y.py", "tests/spec/test_gone.py"]


def ir_ops(text: str) -> list[str]:
    """The op names of the first paragraph of "The program IR" section of a Markdown text."""
    paragraph = section(text, "The program IR").split("\n\n")[0]
    listed = re.search(r"with the ops (.*?) \(", paragraph, re.S)
    assert listed, f"no op list in {paragraph!r}"
    return sorted(listed_names(listed.group(1)))


def test_the_property_guide_lists_every_op_of_the_ir() -> None:
    from resverify.spec.ops import OP_TABLE

    listed = ir_ops((REPO / "docs" / "properties.md").read_text(encoding="utf-8"))
    assert listed == sorted(OP_TABLE), \
        f"docs/properties.md lists the ops {listed}, the IR has {sorted(OP_TABLE)}"


def test_the_op_list_check_can_fail() -> None:
    """A list that leaves ops out is read as it is, so it differs from the table."""
    from resverify.spec.ops import OP_TABLE

    text = "## The program IR\n\nA program with the ops `add` and `tanh` (the norms).\n"
    assert ir_ops(text) == ["add", "tanh"] != sorted(OP_TABLE)
