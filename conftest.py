"""Load the property suite's pytest plugin for every run from the repository root.

``pytest`` and ``pytest --pyargs resverify.properties`` both get ``--backend``, the Hypothesis
profiles and test-vector saving from :mod:`resverify.properties.plugin`.
"""

pytest_plugins = ["resverify.properties.plugin"]
