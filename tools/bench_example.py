"""Bench section ``example``: where the time of one property example goes.

The suite's commonest example, a residual stack drawn by
:func:`resverify.properties.strategies.residual_cases` at the default sizes, float64, is
run through every stage the property suite and a ``cmd:`` exchange pay: Hypothesis
generation, the reference backend, the exact oracle, the error budget, the comparison,
the fast oracle (:mod:`resverify.spec.enclosure`, which does the oracle, budget and
comparison together) and encoding plus decoding the request and the result. Generation is
the wall time of the Hypothesis run minus the time spent in the test body. Each stage is a
fraction of the same examples' backend-plus-generation time, measured in one run.
"""

from __future__ import annotations

import time
from collections import defaultdict

from tools.bench_timing import Row

SECTION = "example"


def _stages(examples: int) -> tuple[dict[str, float], float]:
    from hypothesis import HealthCheck, given, settings

    from resverify.impl import resolve_backend
    from resverify.properties.cases import Case
    from resverify.properties.strategies import residual_cases
    from resverify.spec.budget import error_budget
    from resverify.spec.codec import dumps, loads_request, loads_result
    from resverify.spec.enclosure import verify
    from resverify.spec.exact import evaluate

    backend = resolve_backend("numpy")
    spent: dict[str, float] = defaultdict(float)

    def clock(stage: str, start: float) -> float:
        now = time.perf_counter()
        spent[stage] += now - start
        return now

    @settings(max_examples=examples, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(residual_cases(ops={"add", "residual_add", "mul", "scale", "linear", "relu",
                               "tanh", "sum"}))
    def body(case: Case) -> None:
        t = time.perf_counter()
        request = case.request("float64")
        result = backend.run(request)
        t = clock("backend", t)
        exact = evaluate(request)
        t = clock("exact oracle", t)
        budget = error_budget(request, exact=exact)
        t = clock("budget", t)
        budget.misses(exact, result.output, result.grads)  # type: ignore[union-attr]
        t = clock("compare", t)
        verify(request, result.output, result.grads)  # type: ignore[union-attr]
        t = clock("fast oracle", t)
        loads_request(dumps(request))
        loads_result(dumps(result, request.dtype), request.dtype)
        clock("encode+decode", t)

    start = time.perf_counter()
    body()
    total = time.perf_counter() - start
    spent["generation"] = total - sum(spent.values())
    return dict(spent), total


def rows(quick: bool = False) -> list[Row]:
    """Every stage against backend + generation, over the same examples."""
    examples = 20 if quick else 200
    spent, _ = _stages(examples)
    base = spent["backend"] + spent["generation"]
    out = [Row(SECTION, f"{stage}, {examples} examples", "backend + generation", stage,
               base, spent[stage], spent[stage] / base, unit="x baseline")
           for stage in ("generation", "backend", "exact oracle", "budget", "compare",
                         "fast oracle", "encode+decode")]
    oracle = spent["exact oracle"] + spent["budget"] + spent["compare"]
    out.append(Row(SECTION, f"oracle+budget+compare, {examples} examples",
                   "backend + generation", "exact oracle, budget, compare", base, oracle,
                   oracle / base, "<= 1x baseline", oracle <= base, unit="x baseline"))
    out.append(Row(SECTION, f"fast oracle, {examples} examples", "backend + generation",
                   "fast oracle (all three)", base, spent["fast oracle"],
                   spent["fast oracle"] / base, "<= 1x baseline", spent["fast oracle"] <= base,
                   unit="x baseline"))
    return out
