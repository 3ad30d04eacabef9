"""The compiled variants compile once per program and dtype, and really run compiled code.

The adapter tests (tests/impl/test_adapters.py) check their answers; these check what makes
them compiled variants: the cache that keeps the suite from compiling every example, a
code object per program (dynamo caches per code object), torch's graph count rising
once per program, and the description naming the compiler.
"""

from __future__ import annotations

from typing import Any

import pytest

from resverify.impl.about import describe_backend
from resverify.impl.compile_cache import CompiledCache
from resverify.impl.compiled_backends import program_function
from resverify.spec.fixtures import linear_block_request, shared_operand_request
from resverify.spec.request import Request, Value
from tests.installed import installed_backend


def made(name: str) -> Any:
    return installed_backend(name)


def test_cache_compiles_each_key_once_and_drops_the_least_recent() -> None:
    built: list[str] = []

    def build(key: str) -> str:
        built.append(key)
        return key.upper()

    cache: CompiledCache[str] = CompiledCache(size=2)
    for key in ("a", "b", "a", "c", "b"):
        assert cache.get(key, lambda key=key: build(key)) == key.upper()  # type: ignore[misc]
    assert built == ["a", "b", "c", "b"], built  # "b" was dropped when "c" came
    assert cache.compiles == 4, cache.compiles


def test_each_program_gets_a_code_object_of_its_own() -> None:
    first = program_function(linear_block_request().program, lambda node, args: args[0])
    second = program_function(shared_operand_request().program, lambda node, args: args[0])
    assert first.__code__ is not second.__code__
    assert first.__code__.co_name != second.__code__.co_name


def test_jax_jit_compiles_a_program_once_and_says_it_is_jitted() -> None:
    backend = made("jax-jit")
    for _ in range(3):
        assert isinstance(backend.run(linear_block_request()), Value)
    assert backend.cache.compiles == 1, backend.cache.compiles
    backend.run(shared_operand_request())
    assert backend.cache.compiles == 2, backend.cache.compiles
    about = describe_backend(backend)
    assert about["backend"] == "jax-jit" and about["library"] == "jax", about
    assert about["compiler"] == "jax.jit" and about["jax_enable_x64"] == "True", about


@pytest.mark.slow
def test_torch_compile_compiles_one_graph_per_program_and_dtype() -> None:
    backend = made("torch-compile")
    from torch._dynamo.utils import counters

    before = counters["stats"]["unique_graphs"]
    for _ in range(3):
        assert isinstance(backend.run(linear_block_request()), Value)
    assert backend.cache.compiles == 1, backend.cache.compiles
    assert counters["stats"]["unique_graphs"] - before == 1, dict(counters["stats"])
    backend.run(linear_block_request(dtype="float32"))
    assert backend.cache.compiles == 2, backend.cache.compiles
    about = describe_backend(backend)
    assert about["backend"] == "torch-compile" and about["library"] == "torch", about
    assert about["compiler"] == "torch.compile", about
    assert about["compiler_backend"] == "inductor", about
    assert about["float32_matmul_precision"] == "highest", about


def forward_mode(request: Request) -> Request:
    return Request(request.program, request.inputs, request.dtype, request.cotangent,
                   {k: -v for k, v in request.inputs.items()})


def test_jax_jit_compiles_the_forward_mode_step_once_per_program() -> None:
    backend = made("jax-jit")
    assert isinstance(backend.run(linear_block_request()), Value)
    for _ in range(3):
        result = backend.run(forward_mode(linear_block_request()))
        assert isinstance(result, Value) and result.tangent is not None, result
    assert backend.cache.compiles == 2, backend.cache.compiles  # reverse step, forward step


@pytest.mark.slow
def test_torch_compile_compiles_the_jvp_once_per_program_and_dtype() -> None:
    backend = made("torch-compile")
    for _ in range(3):
        result = backend.run(forward_mode(linear_block_request()))
        assert isinstance(result, Value) and result.tangent is not None, result
    assert backend.cache.compiles == 2, backend.cache.compiles  # the program, its jvp
    backend.run(forward_mode(linear_block_request(dtype="float32")))
    assert backend.cache.compiles == 4, backend.cache.compiles
