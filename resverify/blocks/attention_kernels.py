"""What the attention kernels did on a path: which of scaled-dot-product attention's
backends ran, and the CPU flash kernel's budget rule.

Why a rule of the flash kernel's own: the whole-program budget charges each sum
``gamma_n`` of its terms' magnitudes, which holds in any order of summation; the CPU flash
kernel (``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``) does more than reorder. Within
one block of keys it is the softmax the budget charges, its normalisation moved after the
weighted sum (per term one exp, the sum of exponentials, a reciprocal and a product: what
the softmax's budget allows; in bfloat16 each unnormalised weight rounded once, as eager
rounds each probability once). Over more keys than one block it rescales its running sums
by ``exp(m_old - m_new)``: roundings no budget of the traced program charges, so there the
path is not judged (:meth:`Attention.flash_rule`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from torch import nn

from resverify.blocks.laws_paths import Dispatched
from resverify.blocks.trace import Unjudged

__all__: list[str] = []

SDPA_KERNELS = {"MATH": "_safe_softmax",
                "FLASH_ATTENTION": "_scaled_dot_product_flash_attention_for_cpu"}
"""The op whose dispatch shows that ``scaled_dot_product_attention`` ran on each backend:
the math backend's own softmax (its other ops are the usual matmuls), the CPU flash kernel."""

FLASH = SDPA_KERNELS["FLASH_ATTENTION"]
FLASH_KV_BLOCK = 512
"""Keys the CPU flash kernel takes in one block (``kv_split_size`` in every instantiation
of ``cpu_flash_attention`` in ``FlashAttentionKernel.cpp``): over more, its online softmax
rescales its running sums, roundings the whole-program budget does not charge."""


class Attention(Dispatched):
    """:class:`Dispatched` over the attention kernels, keeping the number of keys of each
    CPU flash call."""

    def __init__(self, names: Collection[str]) -> None:
        super().__init__(names)
        self.keys: list[int] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if func.overloadpacket.__name__ == FLASH:
            self.keys.append(int(args[1].shape[-2]))
        return super().__torch_dispatch__(func, types, args, kwargs)

    def flash_rule(self) -> None:
        """The flash path's budget rule: Unjudged where a flash call took its keys in more
        than one block of :data:`FLASH_KV_BLOCK` (the rescaling of the online softmax)."""
        longest = max(self.keys, default=0)
        if longest > FLASH_KV_BLOCK:
            blocks = -(-longest // FLASH_KV_BLOCK)
            raise Unjudged(f"the CPU flash kernel took {longest} keys in {blocks} blocks of "
                           f"{FLASH_KV_BLOCK}: its online softmax rescaled its running sums "
                           "by exp(m_old - m_new), roundings the budget does not charge")

    def evidence(self) -> str:
        return ", ".join(f"{n} {c}" for n, c in sorted(self.calls.items()))


def hf_sdpa(model: nn.Module) -> bool:
    """A Hugging Face block's attention set to ``sdpa`` (every config in it); False where
    the block has none."""
    configs: dict[int, Any] = {}
    for m in model.modules():
        config = getattr(m, "config", None)
        if hasattr(config, "_attn_implementation"):
            configs[id(config)] = config
    for config in configs.values():
        config._attn_implementation = "sdpa"
    return bool(configs)
