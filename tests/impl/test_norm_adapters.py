"""layer_norm and rms_norm in the tinygrad and PyTensor adapters: claimed, and right.

Both adapters claim the norms (tinygrad through ``Tensor.layernorm`` and ``nn.RMSNorm``'s
formula, PyTensor composed as its users write it); here each answers pinned norm programs,
a single norm and a pre-norm and a post-norm block, within budget in every dtype it claims,
and the finding of docs/findings.md stays reproducible: tinygrad's ``nn.RMSNorm`` module
computes a float64 input in float32, so its vector still fails with the module and passes
with the adapter. The libraries compile each program (clang, Numba), so these are slow
tests; a missing library skips, except under CI=true.
"""

from __future__ import annotations

import importlib.util
import json
import os
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from resverify.impl.backend import Backend
from resverify.properties.assertions import PropertyFailure
from resverify.properties.cases import Case
from resverify.properties.laws_oracle import check_matches_spec
from resverify.properties.strategies import norm_block_case, single_norm_case
from resverify.spec.codec import request_from_dict

pytestmark = pytest.mark.slow

FINDINGS = Path(__file__).resolve().parents[2] / "docs" / "findings"
ROWS = np.array([[1.0, -2.0, 3.5, 0.5], [3.0, 3.0, 3.0, 3.25]])  # the second nearly constant
W = np.array([[0.5, -1.0, 0.25, 0.0], [1.0, 0.5, -0.5, 0.25], [-0.25, 0.75, 1.0, 0.5],
              [0.0, 0.25, -0.5, 1.0]])
CASES = {
    "layer_norm": single_norm_case("layer_norm", ROWS),
    "rms_norm": single_norm_case("rms_norm", ROWS, Fraction(1, 16)),
    "pre-norm layer_norm": norm_block_case("pre", "layer_norm", ROWS, W, Fraction(1, 2), depth=2),
    "post-norm rms_norm": norm_block_case("post", "rms_norm", ROWS, W, Fraction(-3, 4),
                                          Fraction(1, 16), depth=2),
}


def _adapter(module: str, cls: str, library: str) -> Backend:
    if importlib.util.find_spec(library) is None and os.environ.get("CI") != "true":
        pytest.skip(f"{library} is not installed")
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend


ADAPTERS = {"tinygrad": ("resverify.impl.tinygrad_backend", "TinygradBackend", "tinygrad"),
            "pytensor": ("resverify.impl.pytensor_backend", "PytensorBackend", "pytensor")}


@pytest.mark.parametrize("name", sorted(ADAPTERS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_adapter_norms_match_spec_within_budget_in_every_claimed_dtype(name: str,
                                                                       case: str) -> None:
    backend = _adapter(*ADAPTERS[name])
    assert {"layer_norm", "rms_norm"} <= set(backend.capabilities.ops), backend.capabilities
    chosen: Case = CASES[case]
    for dtype in backend.capabilities.dtypes:
        check_matches_spec(backend, chosen.request(dtype))


def test_tinygrad_nn_rmsnorm_module_misses_the_float64_budget_and_the_adapter_does_not() -> None:
    module = _adapter("resverify.impl.tinygrad_backend", "TinygradNnRMSNorm", "tinygrad")
    doc = json.loads((FINDINGS / "tinygrad-nn-rmsnorm-float64.json").read_text("utf-8"))
    request = request_from_dict(doc)
    assert request.dtype == "float64", request.dtype
    with pytest.raises(PropertyFailure, match=r"output\[0, 0\]: backend tinygrad-nn-rmsnorm"):
        check_matches_spec(module, request)
    check_matches_spec(_adapter(*ADAPTERS["tinygrad"]), request)
