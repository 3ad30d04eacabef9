"""What a block check draws and returns: an example's choices (:class:`Draw`) and one law's
record (:class:`LawRecord`).

Why a module of their own: the adapters build a case from a draw, the driver
(:mod:`resverify.blocks.check`) returns records, and the replay (:mod:`.replay`) writes a
record's command; each imports these types from here, so none of them imports another back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hypothesis import strategies as st

from resverify.properties.assertions import PropertyFailure

__all__ = ["Draw", "LawRecord"]

WEIGHT_EXPONENTS = (-12, -4, 0, 1)
INPUT_EXPONENTS = (-2, 0, 3)


@dataclass(frozen=True)
class Draw:
    """One example's choices."""

    batch: int
    seq: int
    seed: int
    weight_exp: int
    input_exp: int


def draws() -> st.SearchStrategy[Draw]:
    """Batch 1-3, sequence 1-4, a seed, the branch ends' and the inputs' scales."""
    return st.builds(Draw, st.integers(1, 3), st.integers(1, 4), st.integers(0, 2**31 - 1),
                     st.sampled_from(WEIGHT_EXPONENTS), st.sampled_from(INPUT_EXPONENTS))


@dataclass(frozen=True)
class LawRecord:
    """One law on one block in one dtype and mode."""

    block: str
    law: str
    dtype: str
    mode: str
    verdict: str
    examples: int  # judged (pass), run until the failure and its shrinking (fail)
    figures: Mapping[str, float] = field(default_factory=dict)
    message: str = ""
    failure: PropertyFailure | None = None
    asked: int = 0
    """The examples the law was asked to judge (0: not known)."""
    draw: Draw | None = None
    """A failure's example, as shrunk: the block, law, dtype, mode and this replay it
    (:mod:`resverify.blocks.replay`); None for a pass, or where it is not known."""

    def line(self) -> str:
        tail = f": {self.message}" if self.message else ""
        return (f"{self.block} {self.law} [{self.dtype}, {self.mode}] {self.verdict} "
                f"({examples_text(self)}){tail}")


def examples_count(verdict: str, examples: int, asked: int) -> str:
    """``25``, or ``4 of 25`` for a pass on fewer examples than asked (``asked`` 0: not
    known). The command, the pages and a record's line all say it so."""
    short = verdict == "pass" and asked > 0 and examples < asked
    return f"{examples} of {asked}" if short else str(examples)


def examples_text(record: LawRecord) -> str:
    """``25 examples``, or ``4 of 25 examples`` for a pass that judged fewer than asked."""
    return f"{examples_count(record.verdict, record.examples, record.asked)} examples"
