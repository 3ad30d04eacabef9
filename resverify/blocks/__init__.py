"""resverify.blocks: the residual laws checked on real modules (see :mod:`.recipe`)."""

from __future__ import annotations

from resverify.blocks.recipe import Recipe, Site, validate

__all__ = ["Recipe", "Site", "validate"]
