"""The Hypothesis property suite: any backend against the exact specification.

Run it with pytest from the repository root (the root ``conftest.py`` loads
:mod:`resverify.properties.plugin`)::

    pytest properties                                  # the NumPy reference, profile ci
    pytest properties --backend numpy --backend mymod:MyBackend
    RESVERIFY_BACKEND=mymod:MyBackend pytest --pyargs resverify.properties
    pytest properties --hypothesis-profile thorough    # or RESVERIFY_PROFILE=thorough
    pytest properties --hypothesis-profile extremes    # huge, tiny, subnormal, signed zeros
    pytest -p resverify.properties.plugin --pyargs resverify.properties    # from any folder

Layout: one law per ``check_*`` function in ``laws_*.py`` (plain functions of a backend
and a request, reusable outside pytest), strategies in :mod:`resverify.properties.strategies`,
profiles in :mod:`resverify.properties.profiles`, thin Hypothesis tests named after their law in
``test_*.py``. The drivers that run laws outside Hypothesis sit beside them: the portable
corpus (:mod:`~resverify.properties.corpus`, its vector groups' file form in
:mod:`~resverify.properties.groups`), the judgement of one saved request or group
(:mod:`~resverify.properties.judge`) and the known failures pinned to saved vectors
(:mod:`~resverify.properties.known_failures`); they say what they found, and
:mod:`resverify.reports.verdicts` decides every status. A failing law raises
:class:`PropertyFailure` with the request; the plugin saves it as a JSON vector and prints
``resverify replay PATH --backend NAME``.

Public API: :class:`Case` (a program with its input values, cotangent and tangents),
:class:`PropertyFailure` (a law's failure, with its request) and the pytest plugin
``resverify.properties.plugin`` with its options; the laws run through ``resverify check``.
"""

from resverify.properties.assertions import PropertyFailure
from resverify.properties.cases import Case

__all__ = ["Case", "PropertyFailure"]
