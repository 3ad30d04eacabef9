"""resverify.blocks: the residual laws checked on the blocks people ship.

A block is described by a :class:`Recipe` (data: a factory, the dtypes it claims, its
residual :class:`Site` s in order; see :mod:`resverify.blocks.recipe`), refused with a
one-line error by :func:`validate` when it names what the module lacks, and checked by
:func:`check_block`, which runs every law of :mod:`resverify.blocks.laws` over examples
Hypothesis draws and returns one :class:`LawRecord` per law, dtype and mode.
:func:`pytest_check` does the same inside a user's own test and fails it with every broken
law's line; :func:`judge_module` traces a torch module into the IR and judges its output and
every gradient element by element against the exact oracle (pointwise: the inputs drawn),
refusing with :class:`NotInIR` what the IR cannot express, and :func:`pytest_exact` does so
for a recipe inside a user's own test; :func:`replay_example` judges a
law again on a failure's one example (:class:`Draw`), as ``resverify blocks replay`` does.
:func:`check_model_layers` judges the laws on each residual layer of a whole model as it
sits there (its weights, its captured call), naming the first layer that breaks one
(:class:`~.model_layers.ModelLayers`, one :class:`~.model_layers.LayerVerdict` per layer)
and, where its zero-branch identity fails, the op where the stream leaves it
(:class:`~.stream_exit.Location`); :func:`layers_of`
finds a model's layers by the catalog recipes' classes.
The known blocks are in :mod:`resverify.blocks.catalog`.

    from resverify.blocks import Recipe, Site, check_block
    records = check_block(my_recipe, ["float32"])

Public API: the names above (``Recipe``, ``Site``, ``validate``, ``check_block``,
``pytest_check``, ``replay_example``, ``Draw``, ``LawRecord``, ``judge_module``, ``pytest_exact``,
``NotInIR``, ``check_model_layers``, ``layers_of``), a
:class:`Finding` for a recipe's documented failures
(:mod:`resverify.blocks.recipe`), the catalog's ``catalog()`` and ``recipe(name)``, and the
two adapters a recipe names (``"torch"``, ``"haiku"``, a Haiku block described by
:class:`~resverify.blocks.haiku_adapter.JaxRecipe`).
"""

from __future__ import annotations

from resverify.blocks.check import check_block, pytest_check, replay_example
from resverify.blocks.exact import judge_module
from resverify.blocks.exact_check import pytest_exact
from resverify.blocks.lower import NotInIR
from resverify.blocks.model_layers import check_model_layers, layers_of
from resverify.blocks.recipe import Recipe, Site, validate
from resverify.blocks.records import Draw, LawRecord

__all__ = ["Draw", "LawRecord", "NotInIR", "Recipe", "Site", "check_block", "check_model_layers",
           "judge_module", "layers_of", "pytest_check", "pytest_exact", "replay_example",
           "validate"]
