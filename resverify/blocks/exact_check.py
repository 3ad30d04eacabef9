"""The exact judgement inside a user's own test, and a judged request saved as a vector.

Why a test function of its own: :func:`~resverify.blocks.check.pytest_check` judges the
laws, which a block whose autodiff agrees with its own mistakes passes; :func:`pytest_exact`
fails the test on the numbers instead (every element of the output and every gradient
against the exact oracle, :func:`~resverify.blocks.exact.judge_recipe`). No green without
judgement: a block the IR cannot express raises :class:`~resverify.blocks.lower.NotInIR`
(listing the ATen ops), and a judgement that bounded only some elements (bfloat16 layers
whose worst-case bounds are infinite) fails as :class:`~resverify.spec.errors.NotJudged`
unless ``allow_partly=True``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from resverify.blocks.exact import Judgement, judge_recipe
from resverify.blocks.recipe import Recipe
from resverify.properties.assertions import PropertyFailure
from resverify.properties.vectors import backend_for, replay_command, save_vector, vector_dir
from resverify.spec.errors import NotJudged, UsageError

__all__ = ["pytest_exact", "replayed", "save_judgement", "save_path"]


def save_judgement(block: str, judgement: Judgement, folder: Path) -> Path:
    """The judged request as a vector under ``folder``, its record naming the block, the
    dtype and the verdict line (kind ``exact``)."""
    assert judgement.request is not None
    return save_vector(judgement.request, folder, f"exact[{judgement.dtype}]", block,
                       str(judgement).splitlines()[0], "exact")


def save_path(block: str, judgement: Judgement, path: str, line: str, replay: str,
              folder: Path) -> Path:
    """The request a path was judged on (the judgement's own: the same parameters, input
    and cotangent) as a vector under ``folder``, its record naming the block, the dtype and
    the ``path``, the path's verdict line and ``path_replay``, the command that runs the
    block on that path again (a backend's replay of the vector judges the traced program,
    not the path)."""
    assert judgement.request is not None
    return save_vector(judgement.request, folder, f"exact[{judgement.dtype} · path {path}]",
                       block, line, "exact", {"path": path, "path_replay": replay})


def replayed(path: Path, judgement: Judgement) -> str:
    """``; replay it: <command>`` on a built-in backend that claims the request, else
    nothing (an engine of the user's may still answer it)."""
    assert judgement.request is not None
    backend = backend_for(judgement.request)
    return f"; replay it: {replay_command(path, backend)}" if backend else ""


def pytest_exact(recipe: Recipe, dtypes: Iterable[str] | None = None, *, seed: int = 0,
                 vectors: str | Path | None = None, allow_partly: bool = False
                 ) -> list[Judgement]:
    """Judge ``recipe``'s block exactly in each of ``dtypes`` (default: every dtype it
    claims) and fail the calling test: :class:`PropertyFailure` naming every judgement with
    an element outside its budget (its first elements, the vector saved under ``vectors``
    (else ``RESVERIFY_VECTOR_DIR``, else ``resverify-vectors/``) and the command that
    replays it), :class:`NotJudged` for a partly judged one unless ``allow_partly``;
    :class:`~resverify.blocks.lower.NotInIR` propagates. Returns the judgements.

    >>> def test_my_block_numbers():  # doctest: +SKIP
    ...     resverify.blocks.pytest_exact(my_recipe, ["float64", "float32"])
    """
    __tracebackhide__ = True
    chosen = list(recipe.dtypes if dtypes is None else dtypes)
    unknown = [d for d in chosen if d not in recipe.dtypes]
    if unknown or not chosen:
        raise UsageError(f"pytest_exact({recipe.name!r}): dtypes {unknown or chosen} are not "
                         f"among those the recipe claims, {list(recipe.dtypes)}")
    judgements = [judge_recipe(recipe, dtype, seed) for dtype in chosen]
    failed = [j for j in judgements if not j.passed]
    if failed:
        folder = vector_dir(None if vectors is None else str(vectors))
        lines = []
        for judgement in failed:
            path = save_judgement(recipe.name, judgement, folder)
            lines += [f"{recipe.name} {judgement}", f"  vector {path}{replayed(path, judgement)}"]
        assert failed[0].request is not None
        raise PropertyFailure(f"{len(failed)} exact judgement(s) of {recipe.name} fail "
                              f"(seed {seed}):\n" + "\n".join(lines), failed[0].request)
    partly = [j for j in judgements if j.verdict == "partly judged"]
    if partly and not allow_partly:
        raise NotJudged(f"{recipe.name}: {len(partly)} exact judgement(s) bounded only some "
                        "elements, expected every element judged (pass allow_partly=True to "
                        "accept):\n" + "\n".join(str(j).splitlines()[0] for j in partly))
    return judgements
