"""The one exception root of resverify, and what each error means and where it is raised.

Why one root with built-in mix-ins (as in Hypothesis's ``errors.py``): ``except
ResverifyError`` catches everything resverify raises on purpose (the CLI prints its one
line and exits 2 for a :class:`UsageError`), while each class also inherits the builtin
it resembles, so code that only knows ``ValueError`` or ``RuntimeError`` still catches it.
Each class names one meaning, so a caller catches exactly what it can handle::

    ResverifyError (Exception)
    ├── UsageError (ValueError)         a user's mistake: CLI option, name, path, API misuse
    ├── InvalidInput (ValueError)       something resverify was given is malformed
    │   ├── InvalidProgram              the IR's structure
    │   ├── InvalidRequest              a request's dtype, values, shapes or cotangent
    │   └── InvalidDocument             JSON text that is not a well-formed document
    ├── ShapeMismatch (ValueError)      an op refuses its operands' shapes
    ├── BackendFault (RuntimeError)     a backend misbehaved beyond giving wrong numbers
    │   ├── BackendTimeout              no answer in time
    │   ├── BackendCrash                the engine's process died
    │   └── BadResult                   an answer that is not a well-formed result
    ├── PropertyFailure (AssertionError)    a law broken (resverify.properties.assertions)
    └── NotClaimed, Refused, BackendRaised  a claim's backend side (resverify.spec.claims.model)

Two classes stay outside the root on purpose, because neither may be an
``Exception`` and every subclass of :class:`ResverifyError` is one:
``resverify.properties.plugin.ExampleTimeout`` is a ``BaseException`` (like
``KeyboardInterrupt``) so that neither Hypothesis nor an ``except Exception`` catches a
test that ran out of time, and ``resverify.cli.runner.Interrupted`` is a
``KeyboardInterrupt`` so that SIGTERM ends a run the way Ctrl-C does.

A backend's typed *answers* (``shape_mismatch``, ``unsupported``, ``backend_error``) are not
exceptions: they are :class:`resverify.spec.request.ResultError` values that ``run``
returns.
"""

from __future__ import annotations

Shape = tuple[int, ...]


class ResverifyError(Exception):
    """Root of every error resverify raises on purpose."""


class UsageError(ResverifyError, ValueError):
    """A user's mistake: a bad command-line option, backend name, path or file, misspelt
    capabilities, or a resverify API called with arguments it does not take.

    Raised by ``resverify.reports.*`` (the CLI prints the one line and exits 2),
    ``resverify.impl.registry`` and ``resverify.impl.external`` (backend names, ``cmd:``),
    ``resverify.impl.backend.Capabilities``, ``resverify.impl.about`` (an ``about()`` that
    is not a mapping), ``resverify.properties.plugin`` (options),
    ``resverify.properties.strategies`` (a strategy asked for what its ops cannot build),
    ``resverify.properties.assertions`` (an unknown failure kind) and
    ``resverify.spec.symbolic`` (a derivation asked beyond its arguments).
    """


class NotJudged(ResverifyError, AssertionError):
    """A check asked for a verdict and judged nothing: no example met a law's precondition,
    or the law it presumes failed (``resverify.blocks.pytest_check``; the command exits 1
    alike). An ``AssertionError``, so the test that asked fails."""


class InvalidInput(ResverifyError, ValueError):
    """Something resverify was given is malformed: refused where it is made or read.

    Catch this to refuse any malformed program, request or document in one clause.
    """


class InvalidProgram(InvalidInput):
    """A program whose structure is wrong: an unknown op, the wrong number of arguments, a
    missing, extra or non-finite attribute (``alpha``, ``eps``), an empty, duplicate or
    unknown name, a cycle, a shape that is not a list of sizes.

    Raised by ``resverify.spec.ir`` (``Node``, ``Program``), ``resverify.spec.codec`` (a
    program document missing a field), ``resverify.spec.derive`` (an op the IR lacks) and
    ``resverify.impl.backend.scale_alpha``. A program
    whose shapes do not fit is *not* invalid: it is a valid question whose answer is a
    ``shape_mismatch`` (:class:`ShapeMismatch`).
    """


class InvalidRequest(InvalidInput):
    """A request whose values do not fit its program or dtype: an unknown dtype, values the
    dtype cannot hold exactly, inputs missing or of the wrong shape, a cotangent of the
    wrong shape (or one given to a shape-invalid program), non-finite values for the exact
    interpreter, a budget asked for a request the spec rejects.

    Raised by ``resverify.spec.request`` (``Request``, ``storage_dtype``, ``as_values``),
    ``resverify.spec.exact``, ``resverify.spec.rational``, ``resverify.spec.budget``,
    ``resverify.impl.tensor`` (a seed that does not fit) and
    ``resverify.spec.claims.model`` (a claim that needs an exact answer for an inexact one).
    """


class InvalidDocument(InvalidInput):
    """JSON text that is not a well-formed resverify document: not JSON, NaN tokens, no
    ``"resverify"`` header or another format version, the wrong ``kind``, a field the
    schema refuses, a number not spelt exactly, an array whose data does not fill its shape.

    Raised by ``resverify.spec.codec`` and ``resverify.cli.replay`` (a test
    vector's record). ``resverify.impl.external`` turns one in an engine's answer into a
    :class:`BadResult`.
    """


class ShapeMismatch(ResverifyError, ValueError):
    """``residual_add`` (or a broadcasting op) was given shapes it does not accept.

    Raised by each op's shape rule (``resverify.spec.ops``, through
    ``resverify.spec.ir.infer_shapes``) and by the reference ops; adapters answer it with
    ``ResultError.mismatch(exc)``.
    """

    def __init__(self, op: str, left: Shape, right: Shape) -> None:
        self.op = op
        self.left = tuple(left)
        self.right = tuple(right)
        super().__init__(
            f"{op}: shape mismatch {list(self.left)} vs {list(self.right)}"
            + (" (residual_add needs equal shapes; add an explicit projection)"
               if op == "residual_add" else "")
        )


class BackendFault(ResverifyError, RuntimeError):
    """A backend misbehaved while running one request, beyond giving wrong numbers.

    ``kind`` classifies the failure for reports: ``timeout`` (no answer in time),
    ``crash`` (the engine's process died), ``bad_result`` (an answer that is not a
    well-formed result: wrong type, shape, dtype, unreadable line). Raised by adapters
    such as :mod:`resverify.impl.external` and caught by the property suite, which turns it into a
    classified failure of that one example; the run goes on.
    """

    kind = "bad_result"


class BackendTimeout(BackendFault):
    """The backend gave no complete answer within its time limit."""

    kind = "timeout"


class BackendCrash(BackendFault):
    """The backend's process died (exited, was killed, or closed its output)."""

    kind = "crash"


class BadResult(BackendFault):
    """The backend answered something that is not a well-formed result for the request.

    Raised by ``resverify.spec.request.check_form`` (output or gradients missing, of the
    wrong shape, dtype or type), by ``ResultError`` (an unknown error kind, shapes on the
    wrong kind), by ``resverify.spec.compare.cells`` (an array of another shape than the
    spec's) and by ``resverify.impl.external`` (an unreadable answer line).
    """

    kind = "bad_result"
