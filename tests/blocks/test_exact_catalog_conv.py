"""The convolutional catalog blocks against the exact oracle: torchvision's BasicBlock and
downsampling Bottleneck and timm's ConvNeXt block trace whole into the IR (``conv2d``,
``batch_norm``, ``layer_norm``, ``linear``, GELU, ReLU) and pass on every element of the
output, the input's gradient and every parameter's gradient, in every dtype they claim
(pointwise: the inputs drawn). The running statistics are buffers torch computes no gradient
of: the judgement names them and judges none.

These tests skip where torchvision or timm cannot be imported (docs/blocks-install.md gives
the environment they run in: ``.venv-vision``).
"""

from __future__ import annotations

import pytest

from resverify.blocks.catalog import catalog
from resverify.blocks.exact import judge_recipe
from resverify.blocks.torch_adapter import build

BLOCKS = {"torchvision.BasicBlock": "torchvision",
          "torchvision.Bottleneck(downsample)": "torchvision",
          "timm.ConvNeXtBlock": "timm"}


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_convolutional_catalog_blocks_pass_on_every_element(name: str, dtype: str) -> None:
    pytest.importorskip(BLOCKS[name], exc_type=ImportError)
    recipe = catalog()[name]
    judgement = judge_recipe(recipe, dtype)
    assert judgement.verdict == "pass", f"{name}: {judgement}"
    block = build(recipe, dtype, 0)
    trained = {f"block.{n}" for n, _ in block.named_parameters()}
    judged = {n.name for n in judgement.program.inputs} - set(judgement.untrained) - {"x"}
    assert judged == trained, f"{name}: judged the gradients of {sorted(judged)}"
    assert all(n.endswith(("running_mean", "running_var")) for n in judgement.untrained), \
        judgement.untrained
