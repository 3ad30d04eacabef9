"""resverify: property-based verification and an exact specification for residual
connections ``y = x + alpha*F(x)``.

``resverify`` is the one top-level import name the distribution installs. Its packages
import one way, each only from those before it:

- :mod:`resverify.spec`: the program IR, requests and results with lossless JSON, the
  exact interpreter, error budgets and the claim catalog;
- :mod:`resverify.impl`: the NumPy reference autograd and the backend adapters;
- :mod:`resverify.properties`: the Hypothesis property suite and its pytest plugin;
- :mod:`resverify.blocks`: real residual modules (torch, Hugging Face, timm, ...) checked
  against the residual laws from a recipe;
- :mod:`resverify.reports`: the verdicts above the element (``reports.verdicts``) and the
  report writers;
- :mod:`resverify.cli`: the ``resverify`` command and the suite runner.

What is promised (each package's ``__init__`` says it in full): the checking API, the
``resverify`` command and the report schema. To import: the IR, requests, the exact
interpreter, budgets and the errors rooted at ``ResverifyError`` (``resverify.spec``); the
``Backend`` protocol, ``Capabilities``, ``NumpyBackend``, ``Tensor`` and ``resolve_backend``
(``resverify.impl``); ``Case``, ``PropertyFailure`` and the pytest plugin
``resverify.properties.plugin`` (``resverify.properties``); ``Recipe``, ``Site``,
``check_block``, ``pytest_check``, ``replay_example``, ``validate`` and the catalog
(``resverify.blocks``). Any other module's ``__all__`` names only what another package of
resverify imports from it: a seam between the layers, not a promise
(tests/meta/test_public_surface.py holds that).

``spec``, ``impl``, ``properties`` and ``reports`` are links to the top-level folders; ``blocks``
and ``cli`` live here. Nothing is imported here, so ``import resverify.spec`` loads only
the specification.
"""
