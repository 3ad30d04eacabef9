"""The pytest plugin of the property suite: backend choice, profiles, vectors, records.

Registered by the repository's root ``conftest.py`` (``pytest_plugins``); another project
can load it with ``-p properties.plugin``.

* ``--backend NAME`` (repeatable; or ``RESVERIFY_BACKEND``, comma-separated; default
  ``numpy``) names the backends, resolved by :func:`impl.resolve_backend`; an unknown name
  is a one-line pytest usage error. Every property test runs once per backend.
* The Hypothesis profile: ``--hypothesis-profile NAME``, else ``RESVERIFY_PROFILE``, else
  ``ci`` (see :mod:`properties.profiles`). The seed: ``--hypothesis-seed N``, else 0 under
  ``ci`` (random under the other profiles); the header shows both.
* A property that fails saves its request as a JSON vector (``--vector-dir``, else
  ``RESVERIFY_VECTOR_DIR``, else ``resverify-vectors/``) and prints the replay command.
* Each property test records ``property``, ``backend``, ``dtype`` (at setup) and
  ``examples`` (+ ``vector`` and ``replay`` on failure) with ``item.user_properties``,
  which reach JUnit XML and every TestReport.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import reject

from impl.backend import Backend
from impl.registry import resolve_backend
from properties.assertions import PropertyFailure
from properties.cases import Case
from properties.profiles import CI_SEED, SEEDED, active_profile, default_profile, load_profile
from properties.vectors import replay_command, save_vector, vector_dir
from spec.errors import UsageError
from spec.ir import OPS, Input, Node, Program
from spec.request import Request

__all__ = ["PropertyRun", "capability_reason"]

_BACKENDS = pytest.StashKey[list[tuple[str, Backend]]]()
_RUN = pytest.StashKey["PropertyRun"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("resverify", "resverify property suite")
    group.addoption("--backend", action="append", dest="resverify_backends", metavar="NAME",
                    help="backend to check: numpy (default), a built-in name, module:attr or "
                         "cmd:COMMAND; repeatable; env RESVERIFY_BACKEND")
    group.addoption("--vector-dir", dest="resverify_vector_dir", metavar="DIR",
                    help="where failing requests are saved (env RESVERIFY_VECTOR_DIR; "
                         "default resverify-vectors/)")


def backend_names(config: pytest.Config) -> list[str]:
    """The backends asked for: the options, else RESVERIFY_BACKEND, else numpy."""
    given = config.getoption("resverify_backends") or []
    env = [n.strip() for n in os.environ.get("RESVERIFY_BACKEND", "").split(",") if n.strip()]
    return list(dict.fromkeys(given or env or ["numpy"]))


@pytest.hookimpl(tryfirst=True)  # before Hypothesis' own pytest_configure reads the seed
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*ops): IR ops the property needs; the test is "
                                       "skipped for a backend that does not claim them")
    try:
        config.stash[_BACKENDS] = [(n, resolve_backend(n)) for n in backend_names(config)]
        profile = config.getoption("--hypothesis-profile", None)
        if not profile:
            profile = default_profile()
            load_profile(profile)
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    if profile in SEEDED and config.getoption("--hypothesis-seed", None) is None:
        config.option.hypothesis_seed = str(CI_SEED)


def pytest_report_header(config: pytest.Config) -> str:
    names = ", ".join(n for n, _ in config.stash[_BACKENDS])
    folder = vector_dir(config.getoption("resverify_vector_dir"))
    seed = config.getoption("--hypothesis-seed", None)
    return (f"resverify: backends {names}; Hypothesis profile {active_profile()}; "
            f"seed {'random' if seed is None else seed}; vectors to {folder}/")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "prop" in metafunc.fixturenames and "backend" in metafunc.fixturenames:
        chosen = metafunc.config.stash[_BACKENDS]
        metafunc.parametrize("backend", [b for _, b in chosen], ids=[n for n, _ in chosen])


def _probe(dtype: str, ops: tuple[str, ...]) -> Request:
    """A tiny request that uses each of ``ops`` once, to ask ``Capabilities.covers``."""
    nodes = []
    for i, op in enumerate(ops):
        args = ("x", "w") if op == "linear" else ("x",) * OPS[op]
        nodes.append(Node(f"n{i}", op, args, Fraction(1) if op == "scale" else None))
    program = Program((Input("x", (1,)), Input("w", (1, 1))), tuple(nodes), "x")
    return Request(program, {"x": np.zeros(1), "w": np.zeros((1, 1))}, dtype, np.zeros(1))


def capability_reason(backend: Backend, dtype: str, ops: tuple[str, ...]) -> str | None:
    """Why ``backend`` cannot be asked for ``ops`` in ``dtype`` (its own words), or None."""
    return backend.capabilities.covers(_probe(dtype, ops))


class PropertyRun:
    """One property test against one backend: counts examples, filters unclaimed requests."""

    def __init__(self, name: str, label: str, backend: Backend) -> None:
        self.name, self.label, self.backend = name, label, backend
        self.examples = 0

    def tick(self) -> None:
        """Count one Hypothesis example (call first thing in the test body)."""
        self.examples += 1

    def request(self, case: Case, dtype: str) -> Request:
        """``case`` as a request; examples using ops the backend does not claim are rejected."""
        request = case.request(dtype)
        if self.backend.capabilities.covers(request) is not None:
            self.examples -= 1  # ticked at the start of the body, but never run
            reject()
        return request


@pytest.fixture
def prop(request: pytest.FixtureRequest, backend: Backend) -> PropertyRun:
    """The running property: records who runs what, skips what the backend does not claim."""
    node = request.node
    params = getattr(getattr(node, "callspec", None), "params", {})
    label = {id(b): n for n, b in request.config.stash[_BACKENDS]}.get(
        id(backend), backend.name)
    run = PropertyRun(node.originalname.removeprefix("test_"), label, backend)
    node.user_properties += [("property", run.name), ("backend", label)]
    if "dtype" in params:
        node.user_properties.append(("dtype", params["dtype"]))
    marker = node.get_closest_marker("needs")
    reason = capability_reason(backend, params.get("dtype", "float64"),
                               tuple(marker.args) if marker else ())
    if reason:
        pytest.skip(f"backend {label}: {reason}")
    node.stash[_RUN] = run
    return run


def _failures(exc: BaseException) -> Iterator[PropertyFailure]:
    if isinstance(exc, PropertyFailure):
        yield exc
    for inner in getattr(exc, "exceptions", ()):
        yield from _failures(inner)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    run = item.stash.get(_RUN, None)
    if run is not None and call.when == "call":
        item.user_properties.append(("examples", run.examples))
        failure = next(_failures(call.excinfo.value), None) if call.excinfo else None
        if failure is not None:
            folder = vector_dir(item.config.getoption("resverify_vector_dir"))
            path = save_vector(failure.request, folder, run.name, run.label)
            command = replay_command(path, run.label)
            item.user_properties += [("vector", str(path)), ("replay", command)]
            failure.add_note(f"test vector: {path}\nreplay: {command}")
    return (yield)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    commands = [value for report in terminalreporter.stats.get("failed", [])
                for key, value in getattr(report, "user_properties", []) if key == "replay"]
    if commands:
        terminalreporter.section("resverify: replay failing examples")
        for command in dict.fromkeys(commands):
            terminalreporter.write_line(str(command))
