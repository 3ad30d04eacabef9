"""resverify: property-based verification and an exact specification for residual
connections ``y = x + alpha*F(x)``.

``resverify`` is the one top-level import name the distribution installs. Its four
packages import one way, each only from those before it:

- :mod:`resverify.spec`: the program IR, requests and results with lossless JSON, the
  exact interpreter, error budgets and the claim catalog;
- :mod:`resverify.impl`: the NumPy reference autograd and the backend adapters;
- :mod:`resverify.properties`: the Hypothesis property suite and its pytest plugin;
- :mod:`resverify.reports`: the ``resverify`` command and the report writers.

Nothing is imported here, so ``import resverify.spec`` loads only the specification.
"""
