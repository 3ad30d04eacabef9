"""Load the property suite's pytest plugin for every run from the repository root.

``pytest`` and ``pytest --pyargs properties`` both get ``--backend``, the Hypothesis
profiles and test-vector saving from :mod:`properties.plugin`.
"""

pytest_plugins = ["properties.plugin"]
