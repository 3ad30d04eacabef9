"""Loaded into each child pytest of ``tools/mutants.py``: the profile without shrinking.

Once the suite's plugin has loaded the Hypothesis profile, this re-registers it under the
same name without the shrink and explain phases, so a run that found a failure stops at
once. The examples generated before the failure do not depend on those phases, so the
verdict and the example count are the profile's own.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings

_KEPT = (Phase.explicit, Phase.reuse, Phase.generate)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    name = settings.get_current_profile_name()
    settings.register_profile(name, settings(settings.get_profile(name), phases=_KEPT))
    settings.load_profile(name)
