"""The pytest plugin of the property suite: backend choice, profiles, vectors, records.

Registered by the repository's root ``conftest.py`` (``pytest_plugins``); another project
can load it with ``-p resverify.properties.plugin``.

* ``--backend NAME`` (repeatable; or ``RESVERIFY_BACKEND``, comma-separated; default
  ``numpy``) names the backends, resolved by :func:`impl.resolve_backend`; an unknown name
  is a one-line pytest usage error. Every property test runs once per backend.
* The Hypothesis profile: ``--hypothesis-profile NAME``, else ``RESVERIFY_PROFILE``, else
  ``ci`` (see :mod:`resverify.properties.profiles`). The seed: ``--hypothesis-seed N``, else 0 under
  ``ci`` (random under the other profiles); the header shows both.
* A property that fails saves its request as a JSON vector (``--vector-dir``, else
  ``RESVERIFY_VECTOR_DIR``, else ``resverify-vectors/``) and prints the replay command.
* Each property test records ``property``, ``backend``, ``mode``, ``dtype`` (at setup)
  and ``examples`` (+ ``vector`` and ``replay`` on failure) with ``item.user_properties``,
  which reach JUnit XML and every TestReport.
* Markers: ``needs(*ops)`` skips a backend that does not claim the ops; ``jvp`` marks a
  forward-mode property (mode ``jvp``; every other property is mode ``vjp``) and skips a
  backend that does not claim mode jvp, in the words of its ``Capabilities.covers``. The
  report's conformance matrix groups the properties by this mode, VJP beside JVP.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from collections.abc import Generator, Iterator
from dataclasses import asdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import event, reject, settings

from resverify.impl.backend import Backend
from resverify.impl.registry import resolve_backend
from resverify.properties.assertions import PropertyFailure
from resverify.properties.cases import Case
from resverify.properties.driver import ExampleRun
from resverify.properties.pinned import pinned_examples
from resverify.properties.profiles import (
    CI_SEED,
    EXTREME_PROFILES,
    SEEDED,
    active_profile,
    default_profile,
    load_profile,
    shrink_limit,
)
from resverify.properties.reach import claimable, reached
from resverify.properties.strategies import (
    EXTREMES,
    FAMILY_OPS,
    SENSIBLE,
    ValueRange,
    claiming,
    drawing,
    leading,
)
from resverify.properties.traffic import Traffic, watching
from resverify.properties.vectors import replay_command, save_vector, vector_dir
from resverify.spec.codec import request_to_dict
from resverify.spec.errors import BackendFault, UsageError
from resverify.spec.ir import OPS, Input, Node, Program
from resverify.spec.ops import OP_TABLE
from resverify.spec.ops.attributes import sample_params
from resverify.spec.request import Request

__all__ = []

INTERNAL_PREFIX = "resverify's own check failed (not charged to the backend; please report it): "
"""How the message of a failure of kind ``internal`` begins."""

_MESSAGE_LIMIT = 4000
_BACKENDS = pytest.StashKey[list[tuple[str, Backend]]]()
_RUN = pytest.StashKey["PropertyRun"]()
_VALUES = pytest.StashKey[ValueRange]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("resverify", "resverify property suite")
    group.addoption("--backend", action="append", dest="resverify_backends", metavar="NAME",
                    help="backend to check: numpy (default), a built-in name, module:attr or "
                         "cmd:COMMAND; repeatable; env RESVERIFY_BACKEND")
    group.addoption("--vector-dir", dest="resverify_vector_dir", metavar="DIR",
                    help="where failing requests are saved (env RESVERIFY_VECTOR_DIR; "
                         "default resverify-vectors/)")
    group.addoption("--status-dir", dest="resverify_status_dir", metavar="DIR",
                    help="where each process leaves the counterexample its test is "
                         "shrinking (for resverify check's status line)")


def backend_names(config: pytest.Config) -> list[str]:
    """The backends asked for: the options, else RESVERIFY_BACKEND, else numpy."""
    given = config.getoption("resverify_backends") or []
    env = [n.strip() for n in os.environ.get("RESVERIFY_BACKEND", "").split(",") if n.strip()]
    return list(dict.fromkeys(given or env or ["numpy"]))


@pytest.hookimpl(tryfirst=True)  # before Hypothesis' own pytest_configure reads the seed
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*ops): IR ops the property needs; the test is "
                                       "skipped for a backend that does not claim them")
    config.addinivalue_line("markers", "reaches(*tags): what the property's examples must "
                                       "reach under the ci profile (resverify.properties."
                                       "reach); a tag left unreached is recorded as unreached")
    config.addinivalue_line("markers", "families(*names): the property is split into one "
                                       "test per branch family, each beginning its stacks "
                                       "with that family (resverify.properties.strategies."
                                       "leading) and running its share of the examples")
    config.addinivalue_line("markers", "jvp: a forward-mode property (its requests carry "
                                       "tangents); skipped for a backend that does not claim "
                                       "mode jvp, shown in the matrix's jvp group")
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
    config.stash[_VALUES] = EXTREMES if profile in EXTREME_PROFILES else SENSIBLE


def pytest_report_header(config: pytest.Config) -> str:
    names = ", ".join(n for n, _ in config.stash[_BACKENDS])
    folder = vector_dir(config.getoption("resverify_vector_dir"))
    seed = config.getoption("--hypothesis-seed", None)
    values = "extreme" if config.stash[_VALUES].extremes else "sensible"
    return (f"resverify: backends {names}; Hypothesis profile {active_profile()}; "
            f"seed {'random' if seed is None else seed}; {values} values; "
            f"vectors to {folder}/")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "prop" in metafunc.fixturenames and "backend" in metafunc.fixturenames:
        chosen = metafunc.config.stash[_BACKENDS]
        metafunc.parametrize("backend", [b for _, b in chosen], ids=[n for n, _ in chosen])
        split = metafunc.definition.get_closest_marker("families")
        if split is not None:
            metafunc.parametrize("family", list(split.args), indirect=True)


@pytest.fixture
def family(request: pytest.FixtureRequest) -> str | None:
    """The branch family a law split by family (the marker ``families``) begins its stacks
    with in this test (:func:`resverify.properties.strategies.leading`); None otherwise."""
    return getattr(request, "param", None)


def _probe(dtype: str, ops: tuple[str, ...], mode: str = "vjp") -> Request:
    """A tiny request that uses each of ``ops`` once (with tangents in mode ``jvp``), to ask
    ``Capabilities.covers``."""
    nodes = []
    for i, op in enumerate(ops):
        args = ("x", "w") if op == "linear" else ("x",) * OPS[op]
        entry = OP_TABLE[op]
        if entry.attribute is not None:  # α, ε: 1
            exact: dict[str, Any] = {entry.attribute: Fraction(1)}
            nodes.append(Node(f"n{i}", op, args, **exact))
        else:  # a layout op's integer attributes: its first sample's
            nodes.append(Node(f"n{i}", op, args, params=sample_params(entry.samples[0])))
    program = Program((Input("x", (1,)), Input("w", (1, 1))), tuple(nodes), "x")
    values = {"x": np.zeros(1), "w": np.zeros((1, 1))}
    return Request(program, values, dtype, np.zeros(1),
                   tangents=values if mode == "jvp" else None)


def capability_reason(backend: Backend, dtype: str, ops: tuple[str, ...],
                      mode: str = "vjp") -> str | None:
    """Why ``backend`` cannot be asked for ``ops`` in ``dtype`` and ``mode`` (its own words),
    or None."""
    return backend.capabilities.covers(_probe(dtype, ops, mode))


def property_mode(node: pytest.Item) -> str:
    """``jvp`` for a test marked ``jvp`` (forward mode), else ``vjp``."""
    return "jvp" if node.get_closest_marker("jvp") is not None else "vjp"


class PropertyRun(ExampleRun):
    """One property test against one backend: counts examples, filters unclaimed requests.

    Its examples are counted, its first counterexample noticed and its shrinking capped as
    every law's are (:class:`resverify.properties.driver.ExampleRun`, the block laws' too),
    the ``prop`` fixture wrapping :meth:`counting` around every example the test runs; a
    test body never counts its own. ``shrink_limit`` is the profile's
    (:data:`resverify.properties.profiles.SHRINK_LIMITS`). With ``status_dir``, each
    counterexample found is written there for ``resverify check``'s status line
    (:meth:`write_status`).
    """

    failures = (Exception, pytest.fail.Exception)

    def __init__(self, name: str, label: str, backend: Backend, *,
                 shrink_limit: int | None = None, status_dir: Path | None = None,
                 nodeid: str = "", max_examples: int | None = None) -> None:
        super().__init__(shrink_limit=shrink_limit, max_examples=max_examples)
        self.name, self.label, self.backend = name, label, backend
        self.status_dir, self.nodeid = status_dir, nodeid
        self.reached: Counter[str] = Counter()  # examples per tag reached (reach.reached)
        self.declared: tuple[str, ...] = ()  # the tags its marker ``reaches`` declares
        self.traffic = Traffic()  # its calls to the backend and their warnings
        self.pinned_elsewhere: tuple[Case, ...] = ()  # run in another test of its law

    def found(self, exc: BaseException) -> None:
        self.write_status(exc)

    def write_status(self, exc: BaseException) -> None:
        """Leave the latest counterexample in ``status_dir/<pid>.json`` (replaced
        atomically): the test, ``failed_after``, when the first counterexample was found
        (``since``, seconds since the epoch), the examples so far and wanted, the shrink
        cap, the message, its kind and, for a :class:`PropertyFailure`, the request as
        sent and the first failing element."""
        if self.status_dir is None:
            return
        request = getattr(exc, "request", None)
        state = {"nodeid": self.nodeid, "property": self.name, "backend": self.label,
                 "failed_after": self.failed_after, "examples": self.examples,
                 "max_examples": self.max_examples, "shrink_limit": self.shrink_limit,
                 "since": self._found_at,
                 "message": str(exc)[:_MESSAGE_LIMIT], "kind": failure_kind(exc),
                 "request": request_to_dict(request) if isinstance(request, Request) else None,
                 "element": _element(exc), "runs": _runs(exc)}
        self.status_dir.mkdir(parents=True, exist_ok=True)
        path = self.status_dir / f"{os.getpid()}.json"
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps(state), encoding="utf-8")
        partial.replace(path)

    def clear_status(self) -> None:
        """The test ended: its status file goes."""
        if self.status_dir is not None:
            (self.status_dir / f"{os.getpid()}.json").unlink(missing_ok=True)

    def request(self, case: Case, dtype: str) -> Request:
        """``case`` as a request; examples using ops the backend does not claim are rejected.
        The tags a request reaches (:func:`resverify.properties.reach.reached`) go to
        Hypothesis' ``event`` and, until a counterexample is found (the examples after it
        shrink it), into :attr:`reached`."""
        request = case.request(dtype)
        reason = self.backend.capabilities.covers(request)
        if reason is not None or any(case is p for p in self.pinned_elsewhere):
            self.examples -= 1  # counted when it started, but never run
            event(f"rejected, unclaimed: {reason}" if reason else "rejected, pinned: run in "
                  "the law's first test")  # --hypothesis-show-statistics counts it
            reject()
        tags = reached(request)
        for tag in sorted(tags):
            event(tag)
        if self.failed_after is None:
            self.reached.update(tags)
        return request

    def floor(self) -> list[str]:
        """The tags its marker ``reaches`` declares, less ``op:NAME`` for an op the backend
        does not claim (no example could reach it): what the report holds the law to, per
        backend and dtype (:func:`resverify.properties.reach.claimable`)."""
        return claimable(self.declared, self.backend.capabilities.ops)


@pytest.fixture
def prop(request: pytest.FixtureRequest, backend: Backend, family: str | None
         ) -> Iterator[PropertyRun]:
    """The running property: records who runs what, skips what the backend does not claim.

    While the test runs, strategies build programs from the backend's claimed ops only
    (:func:`resverify.properties.strategies.claiming`), values in the test's dtype from the
    run's value range (:func:`resverify.properties.strategies.drawing`), and every example
    it runs is counted (:meth:`PropertyRun.counting`), its shrinking capped by the profile
    (:func:`resverify.properties.profiles.shrink_limit`).
    """
    node = request.node
    params = getattr(getattr(node, "callspec", None), "params", {})
    label = {id(b): n for n, b in request.config.stash[_BACKENDS]}.get(
        id(backend), backend.name)
    status = request.config.getoption("resverify_status_dir")
    run = PropertyRun(node.originalname.removeprefix("test_"), label, backend,
                      shrink_limit=shrink_limit(active_profile()), nodeid=node.nodeid,
                      status_dir=None if status is None else Path(status),
                      max_examples=settings().max_examples)
    mode = property_mode(node)
    node.user_properties += [("property", run.name), ("backend", label), ("mode", mode)]
    if "dtype" in params:
        node.user_properties.append(("dtype", params["dtype"]))
    marker = node.get_closest_marker("needs")
    reason = capability_reason(backend, params.get("dtype", "float64"),
                               tuple(marker.args) if marker else (), mode)
    if reason:
        pytest.skip(f"backend {label}: {reason}")
    unclaimed = sorted(FAMILY_OPS[family] - set(backend.capabilities.ops)) if family else []
    if unclaimed:
        pytest.skip(f"backend {label} does not claim the ops of branch family {family}: "
                    f"{unclaimed}")
    floor = node.get_closest_marker("reaches")
    run.declared = tuple(floor.args) if floor else ()
    split = node.get_closest_marker("families")
    if split is not None and family != split.args[0]:  # pinned examples: in one test only
        pinned = pinned_examples(request.function)
        run.pinned_elsewhere = tuple(v for values in (pinned.examples if pinned else ())
                                     for v in values.values() if isinstance(v, Case))
    node.stash[_RUN] = run
    dtype = params.get("dtype", "float64")
    with (claiming(backend.capabilities.ops), drawing(dtype, request.config.stash[_VALUES]),
          leading(family), run.counting(request.function), watching() as run.traffic):
        yield run


class ExampleTimeout(BaseException):
    """pytest-timeout's limit reached inside a test. A BaseException, like
    KeyboardInterrupt, so that neither Hypothesis (which would retry and shrink an example
    that hangs again) nor an ``except Exception`` in the suite catches it.

    Outside :class:`~resverify.spec.errors.ResverifyError` on purpose, and it cannot be
    inside: every subclass of that root is an ``Exception`` (see :mod:`resverify.spec.errors`)."""


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's signal method, raising :class:`ExampleTimeout` where pytest-timeout
    calls ``pytest.fail`` (which Hypothesis catches as a failing example and shrinks)."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None  # pytest-timeout's own thread method
    limit = float(settings.timeout)

    def expire(signum: int, frame: object) -> None:
        raise ExampleTimeout(f"Timeout (>{limit:g}s) from pytest-timeout: the test did not "
                             "end in time")

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # pytest-timeout calls it
    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    return True


def _leaves(exc: BaseException, grouped: bool = False) -> Iterator[BaseException]:
    """``exc`` itself, or every exception inside it when it is a group: Hypothesis reports
    several distinct failures of one test, or a flaky one, as an exception group. A group
    of Exceptions cannot hold a BaseException such as :class:`ExampleTimeout`, so Hypothesis
    puts in its place a plain Exception caused by it: inside a group, that cause is the
    failure."""
    inner = getattr(exc, "exceptions", None)
    if inner is None:
        cause = exc.__cause__
        if grouped and cause is not None and not isinstance(cause, Exception):
            exc = cause
        yield exc
        return
    for each in inner:
        yield from _leaves(each, grouped=True)


def failure_kind(exc: BaseException) -> str:
    """The kind of a test's failure (see :class:`PropertyFailure`): its own kind for a
    PropertyFailure, ``timeout`` for :class:`ExampleTimeout`, a BackendFault's kind, and
    ``internal`` for anything else.

    Everything a backend does reaches the laws through :func:`~resverify.properties.
    assertions.send`, which turns its misbehaviour (a wrong value, an exception escaping
    ``run``, a malformed answer) into a PropertyFailure carrying the request as sent. Any
    other exception, a plain ``assert`` on the spec side included, is resverify's own: it
    has no request to save, so it is never charged to the backend as a law it broke."""
    if isinstance(exc, PropertyFailure):
        return str(getattr(exc, "kind", "law"))
    if isinstance(exc, ExampleTimeout):
        return "timeout"
    if isinstance(exc, BackendFault):
        return exc.kind
    return "internal"


def _sent(leaf: BaseException) -> Request | None:
    """The request a failure charged to the backend was about: a PropertyFailure's, or
    the one the backend was running when the time limit struck (see ``send``)."""
    if isinstance(leaf, PropertyFailure):
        return leaf.request
    if isinstance(leaf, ExampleTimeout):
        sent = getattr(leaf, "resverify_request", None)
        return sent if isinstance(sent, Request) else None
    return None


def _runs(leaf: BaseException) -> int | None:
    """How many runs a failure's replay needs (a difference between runs), if it says."""
    return leaf.runs if isinstance(leaf, PropertyFailure) else None


def _element(leaf: BaseException) -> dict[str, str] | None:
    """The first failing element a value check recorded on its PropertyFailure, if any."""
    element = leaf.element if isinstance(leaf, PropertyFailure) else None
    return None if element is None else asdict(element)


def _failures(item: pytest.Item, run: PropertyRun, exc: BaseException) -> list[dict[str, Any]]:
    """Every distinct failure inside ``exc``: message, kind, and for a PropertyFailure the
    request saved as a vector (as it was sent) with the command that replays it."""
    folder = vector_dir(item.config.getoption("resverify_vector_dir"))
    found: dict[str, dict[str, Any]] = {}
    for leaf in _leaves(exc):
        kind = failure_kind(leaf)
        text = str(leaf) if isinstance(leaf, PropertyFailure | ExampleTimeout) else (
            f"{type(leaf).__name__}: {leaf}")
        if kind == "internal":
            text = f"{INTERNAL_PREFIX}{text}"
        message = text[:_MESSAGE_LIMIT]
        if message in found:
            continue
        entry: dict[str, Any] = {"message": message, "kind": kind, "vector": None,
                                 "replay": None, "element": _element(leaf)}
        sent = _sent(leaf)
        if sent is not None:
            path = save_vector(sent, folder, run.name, run.label, message, kind)
            entry.update(vector=str(path), replay=replay_command(path, run.label, _runs(leaf)))
            leaf.add_note(f"test vector: {path}\nreplay: {entry['replay']}")
        found[message] = entry
    return list(found.values())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Records ``examples``, ``max_examples`` and, for a failed property test, its
    ``failure_kind`` and ``failures`` (each distinct one with its vector), plus ``vector``
    and ``replay`` of the first; after a counterexample, ``failed_after`` (the examples up
    to and including the first), ``shrink_examples``, ``shrink_seconds`` and
    ``shrink_limit``."""
    run = item.stash.get(_RUN, None)
    if run is not None and call.when == "call":
        run.clear_status()
        item.user_properties += [("examples", run.examples), ("max_examples", run.max_examples),
                                 ("reached", dict(sorted(run.reached.items()))),
                                 ("floor", run.floor()),
                                 ("backend_warnings", run.traffic.heard())]
        if run.failed_after is not None:
            item.user_properties += [("failed_after", run.failed_after),
                                     ("shrink_examples", run.shrink_examples),
                                     ("shrink_seconds", run.shrink_seconds),
                                     ("shrink_limit", run.shrink_limit)]
        excinfo = call.excinfo
        if excinfo is not None and not excinfo.errisinstance(pytest.skip.Exception):
            failures = _failures(item, run, excinfo.value)
            item.user_properties += [("failure_kind", failures[0]["kind"]),
                                     ("failures", failures)]
            first = next((f for f in failures if f["vector"]), None)
            if first is not None:
                item.user_properties += [("vector", first["vector"]), ("replay", first["replay"])]
    return (yield)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    commands = [value for report in terminalreporter.stats.get("failed", [])
                for key, value in getattr(report, "user_properties", []) if key == "replay"]
    if commands:
        terminalreporter.section("resverify: replay failing examples")
        for command in dict.fromkeys(commands):
            terminalreporter.write_line(str(command))
