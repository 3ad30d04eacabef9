"""Several suite runs in one process: the child of ``tools/flakes.py --warm K``.

Eager JAX lowers and compiles one XLA executable per primitive and shape and keeps it
for the life of the process; a child per seed starts with none and spends most of its
run re-lowering executables the run before had (JAX's persistent compilation cache only
saves the XLA compile, not the lowering). This child runs K seeds' suites one after
another in one process (pytest's ``main``, each with its own ``--hypothesis-seed`` and
report log), so a later seed finds its executables in memory. The examples and verdicts
of a seed are those of a child of its own: Hypothesis draws from the seed alone (the
``ci`` profile has no example database) and the tests run in this process, in order
(``-n 0``), as they do in one xdist worker.

    python tools/flakes_batch.py RUNS.json

RUNS.json is a list of ``{"folder": DIR, "args": [pytest arguments]}``; after each run
this writes ``DIR/result.json`` (``{"exit": pytest's exit code, "seconds": wall time}``),
so the runs that finished are known however the process ends.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: flakes_batch.py RUNS.json", file=sys.stderr)
        return 2
    for run in json.loads(Path(argv[0]).read_text()):
        began = time.monotonic()
        code = pytest.main(list(run["args"]))
        Path(run["folder"], "result.json").write_text(json.dumps(
            {"exit": int(code), "seconds": round(time.monotonic() - began, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
