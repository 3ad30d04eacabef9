"""The Hypothesis profiles of properties/profiles.py: what each one asks of Hypothesis."""

from __future__ import annotations

from pathlib import Path

from hypothesis import Phase

from resverify.properties.profiles import PROFILES, SHRINK_LIMITS, shrink_limit

COMMANDS_DOC = Path(__file__).resolve().parents[2] / "docs" / "commands.md"
"""The command reference, whose ``--profile`` row says what each profile runs."""


def test_dev_profile_runs_a_handful_of_examples_and_fewer_than_ci() -> None:
    dev, ci = PROFILES["dev"].max_examples, PROFILES["ci"].max_examples
    assert dev <= 10, f"dev runs {dev} examples a test, expected a handful (<= 10)"
    assert dev < ci, f"dev runs {dev} examples a test, ci {ci}: dev must be the quicker look"


def test_every_profile_but_thorough_caps_shrinking_and_dev_caps_it_hardest() -> None:
    assert set(SHRINK_LIMITS) == set(PROFILES), (sorted(SHRINK_LIMITS), sorted(PROFILES))
    assert shrink_limit("thorough") is None, shrink_limit("thorough")
    capped = {name: shrink_limit(name) or 0 for name in ("dev", "ci", "extremes")}
    assert all(limit > 0 for limit in capped.values()), capped
    assert capped["dev"] < capped["ci"], capped


def test_profiles_that_cap_shrinking_leave_out_the_explain_phase() -> None:
    for name, profile in PROFILES.items():
        capped = shrink_limit(name) is not None
        assert (Phase.explain in profile.phases) is not capped, (name, profile.phases)


def test_commands_doc_says_how_many_examples_each_profile_runs_and_its_shrink_cap() -> None:
    line = next(line for line in COMMANDS_DOC.read_text(encoding="utf-8").splitlines()
                if line.startswith("| `--profile NAME` |"))
    for name, profile in PROFILES.items():
        said = line[line.index(f"`{name}`"):]
        said = said[:min((said.index(f"`{o}`", 1) for o in PROFILES if f"`{o}`" in said[1:]),
                         default=len(said))]
        assert f"{profile.max_examples}" in said, (name, profile.max_examples, said)
        limit = shrink_limit(name)
        assert (f"capped at {limit}" in said) if limit else ("not capped" in said), (
            name, limit, said)
