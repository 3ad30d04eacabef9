"""The block tests need torch: where it is not installed the whole folder is one skip with
the reason (:func:`tests.installed.skip_without_torch`; under CI the import errors stand)."""

from tests.installed import skip_without_torch

skip_without_torch()
