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

``spec``, ``impl``, ``properties`` and ``reports`` are links to the top-level folders; ``blocks``
and ``cli`` live here. Nothing is imported here, so ``import resverify.spec`` loads only
the specification.
"""
