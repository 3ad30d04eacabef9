#!/usr/bin/env bash
# tools/gpu-check.sh: the one command a session with a lent CUDA machine runs (issue 27).
#
# It installs resverify offline, records the device, runs `resverify check` (profile ci,
# --no-plots) once per GPU variant, each under `timeout` with its own report folder, and
# writes $OUT/summary.md: one row per step with its exit code, seconds, the properties
# pass/fail/skipped read from that step's report.json, the numerics settings the
# report's `about` shows, and the first failure. Every step runs and is recorded, whatever
# the one before it did (set -u, not -e); the summary is written even when a step fails,
# times out, or the script is interrupted.
#
# Usage: tools/gpu-check.sh [--dry-run] [--wheels DIR] [--out DIR] [--step-timeout S]
#                           [--budget S] [-n N] [--select EXPR] [--only V1,V2] [-- PYTEST_ARGS]
#   --dry-run        (or RESVERIFY_GPU_CHECK_CPU=1) the CPU backends in place of the GPU ones,
#                    no install: tests the plumbing on a machine without a GPU
#   --wheels DIR     wheels of the pure-Python deps the machine lacks (default: ./wheels)
#   --out DIR        where reports and summary go (default: $OUT, else ./gpu-check-out)
#   --step-timeout S seconds one variant may run (default 360; RESVERIFY_GPU_STEP_TIMEOUT)
#   --budget S       total seconds: a variant gets at most what is left, and is skipped with
#                    under 30 s left (default 480; RESVERIFY_GPU_BUDGET)
#   -n N             pytest-xdist processes per variant (default 3; 0 for none)
#   --sequential     the variants one after another (default: all at once)
#   --select EXPR    passed to the suite as `-- -k EXPR`
#   --only LIST      run only these variants (comma-separated names from the table below)
#   --variant SPEC   'name|backend|NAME=VALUE ...|note[|timeout]' in place of the table
#                    (repeatable; timeout overrides --step-timeout for that variant)
#   --no-claims      passed to resverify check (faster; the dry-run test uses it)
# See docs/gpu.md.
set -u

REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 2

DRY=${RESVERIFY_GPU_CHECK_CPU:-0}
WHEELS=${RESVERIFY_GPU_WHEELS:-$REPO/wheels}
OUTDIR=${OUT:-$REPO/gpu-check-out}
STEP_TIMEOUT=${RESVERIFY_GPU_STEP_TIMEOUT:-360}
PARALLEL=${RESVERIFY_GPU_PARALLEL:-1}
BUDGET=${RESVERIFY_GPU_BUDGET:-480}
NPROC=${RESVERIFY_GPU_NPROC:-3}
SELECT=""
ONLY=""
CUSTOM=()
CLAIMS=()
PYTEST_ARGS=()

while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --wheels) WHEELS=$2; shift ;;
        --out) OUTDIR=$2; shift ;;
        --step-timeout) STEP_TIMEOUT=$2; shift ;;
        --budget) BUDGET=$2; shift ;;
        -n) NPROC=$2; shift ;;
        --select) SELECT=$2; shift ;;
        --only) ONLY=$2; shift ;;
        --variant) CUSTOM+=("$2"); shift ;;
        --no-claims) CLAIMS=(--no-claims) ;;
        --sequential) PARALLEL=0 ;;
        --) shift; PYTEST_ARGS=("$@"); break ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "gpu-check: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$DRY" = "0" ] || DRY=1

mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
STEPS=$OUTDIR/steps.tsv
: > "$STEPS"
START=$SECONDS

# The machine's own Python (its image holds CUDA torch and JAX); on the CPU, the venv's.
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ "$DRY" = 1 ] && [ -x "$REPO/.venv/bin/python" ]; then PY=$REPO/.venv/bin/python
else PY=$(command -v python3 || command -v python); fi
SITE=${TMPDIR:-/tmp}/resverify-gpu-site  # the carried wheels (--target): no PEP 668, no root
export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONWARNINGS="ignore:Editable installation"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # xdist workers share the GPU: no 75% grab each

# variant | backend | environment it sets | what it stands for
if [ "$DRY" = 1 ]; then
    VARIANTS=(
        "cpu-torch|torch||torch on the CPU (dry run for torch-cuda)"
        "cpu-torch-tf32|torch|TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1|torch, TF32 switch set (no effect on the CPU)"
        "cpu-jax|jax|JAX_PLATFORMS=cpu|jax on the CPU, default matmul precision"
        "cpu-jax-highest|jax|JAX_PLATFORMS=cpu JAX_DEFAULT_MATMUL_PRECISION=highest|jax on the CPU, precision highest"
    )
else
    VARIANTS=(
        "torch-cuda|torch-cuda||TF32 as the image sets it"
        "torch-cuda-tf32|torch-cuda|TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1|TF32 allowed for cuBLAS matmuls"
        "torch-cuda-highest|torch-cuda|NVIDIA_TF32_OVERRIDE=0|TF32 off in CUDA's libraries (resverify has no option for float32_matmul_precision)"
        "jax-gpu|jax|JAX_PLATFORMS=cuda|JAX on the GPU, default float32 matmul precision"
        "jax-gpu-highest|jax|JAX_PLATFORMS=cuda JAX_DEFAULT_MATMUL_PRECISION=highest|JAX on the GPU, precision highest"
    )
fi
[ ${#CUSTOM[@]} -gt 0 ] && VARIANTS=("${CUSTOM[@]}")

record() {  # name, rc, seconds, report dir ("" for none), note
    printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5//$'\t'/ }" >> "$STEPS"
}

write_summary() {
    "$PY" - "$STEPS" "$OUTDIR/summary.md" "$DRY" <<'PYEOF'
import json, pathlib, sys
steps, out, dry = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3] == "1"
KEYS = ("device", "platform", "cuda.matmul.allow_tf32", "float32_matmul_precision",
        "jax_default_matmul_precision", "deterministic_algorithms")
def cell(s):
    return str(s).replace("|", "\\|").replace("\n", " ")[:400]
rows = ["# gpu-check summary" + (" (dry run: CPU backends)" if dry else ""), "",
        "| step | exit | seconds | pass | fail | skipped | settings (report about) "
        "| first failure / note |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
for line in steps.read_text().splitlines():
    name, rc, secs, rdir, note = (line.split("\t") + [""] * 5)[:5]
    passed = failed = skipped = settings = "-"
    first = note
    report = pathlib.Path(rdir) / "report.json" if rdir else None
    if report is not None:
        try:
            d = json.loads(report.read_text())
            p = d["summary"]["properties"]
            passed, failed, skipped = p["pass"], p["fail"], p["skipped"]
            rc = f"{rc} ({d.get('status')})"
            about = {}
            for b in d.get("backends", []):
                about.update(b.get("about") or {})
            settings = ", ".join(f"{k}={about[k]}" for k in KEYS if k in about) or "-"
            bad = [e for e in d.get("properties", []) if e.get("status") == "fail"]
            if bad:
                msg = (bad[0].get("message") or "").strip().splitlines()
                where = bad[0].get("vector") or "no vector"
                if where.startswith(str(out.parent) + "/"):
                    where = where[len(str(out.parent)) + 1:]
                text = msg[0] if msg else bad[0].get("failure_kind")
                first = f"{bad[0]['id']} [{where}]: {str(text)[:160]}"
                first = f"{first}; {note}" if note else first
        except (OSError, ValueError, KeyError, TypeError) as exc:
            first = f"no readable report.json ({type(exc).__name__}); {note}".strip("; ")
            try:
                log = (pathlib.Path(rdir) / "check.log").read_text(errors="replace")
                tail = [x for x in log.splitlines() if x.strip()]
                first += f"; check.log ends: {tail[-1].strip()[:200]}" if tail else ""
            except OSError:
                pass
    rows.append("| " + " | ".join(cell(c) for c in (name, rc, secs, passed, failed, skipped,
                                                      settings, first or "")) + " |")
out.write_text("\n".join(rows) + "\n")
PYEOF
    echo "gpu-check: summary in $OUTDIR/summary.md"
}
trap write_summary EXIT
trap 'record interrupted 130 $((SECONDS - START)) "" "script interrupted"; exit 130' INT TERM
RAN=()

# (a) install: the carried wheels into $SITE, then resverify itself (editable, offline); the
# runs go through `python -m resverify.cli.main` with the repository on PYTHONPATH, so they
# work even where the editable install cannot (an old setuptools, a read-only site).
t0=$SECONDS
if [ "$DRY" = 1 ]; then
    record install 0 0 "" "dry run: skipped (the venv has resverify)"
else
    (  # a subshell: its `exit` ends only this step
        echo "python: $PY"; "$PY" --version
        rc=0
        shopt -s nullglob; whls=("$WHEELS"/*.whl); shopt -u nullglob
        if [ ${#whls[@]} -gt 0 ]; then
            "$PY" -m pip install --no-index --no-deps --target "$SITE" "${whls[@]}" || rc=$?
        else
            echo "no wheels in $WHEELS"
        fi
        PIP_BREAK_SYSTEM_PACKAGES=1 timeout 60 "$PY" -m pip install --no-index --no-deps \
            --no-build-isolation --find-links "$WHEELS" -e "$REPO" \
            || echo "editable install failed: running from the repository on PYTHONPATH"
        "$PY" - <<'PYEOF' || rc=$?
import importlib, sys
missing = []
for mod in ("numpy", "sympy", "mpmath", "hypothesis", "pytest", "jsonschema", "xdist",
            "pytest_timeout", "pytest_reportlog", "ml_dtypes", "resverify.cli.main"):
    try:
        importlib.import_module(mod)
    except Exception as exc:  # noqa: BLE001 - any failure is a missing dependency here
        missing.append(f"{mod} ({type(exc).__name__})")
        print(f"{mod}: {type(exc).__name__}: {exc}")
print("missing: " + ("; ".join(missing) if missing else "none"))
sys.exit(1 if missing else 0)
PYEOF
        exit $rc
    ) > "$OUTDIR/install.log" 2>&1
    rc=$?
    record install $rc $((SECONDS - t0)) "" "$(grep '^missing:' "$OUTDIR/install.log" | tail -1)"
fi

# (b) the device and the libraries.
t0=$SECONDS
{
    echo "## date"; date -u
    echo "## nvidia-smi"; timeout 20 nvidia-smi 2>&1 || echo "(nvidia-smi: exit $?)"
    echo "## python"; echo "$PY"; "$PY" --version 2>&1
    echo "## torch"
    timeout 45 "$PY" -c '
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
print("allow_tf32 matmul", torch.backends.cuda.matmul.allow_tf32,
      "cudnn", torch.backends.cudnn.allow_tf32,
      "float32_matmul_precision", torch.get_float32_matmul_precision())
' 2>&1 || echo "(torch: exit $?)"
    echo "## jax"
    timeout 45 "$PY" -c '
import jax
print("jax", jax.__version__, "backend", jax.default_backend(), "devices", jax.devices())
print("jax_default_matmul_precision", jax.config.jax_default_matmul_precision)
' 2>&1 || echo "(jax: exit $?)"
    echo "## environment"; env | grep -E '^(CUDA|NVIDIA|TORCH|JAX|XLA)_' | sort
} > "$OUTDIR/env.txt" 2>&1
record env $? $((SECONDS - t0)) "" "see env.txt"

# (c) one `resverify check` per variant: all at once by default (each with -n N processes,
# so 5 variants x 3 share the 16 cores and the GPU), or one after another (--sequential).
# Each gets min(its limit, what is left of the budget); under 30 s left, it is skipped.
ARGS=()
[ -n "$SELECT" ] && ARGS+=(-k "$SELECT")
ARGS+=(${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"})
NFLAG=()
[ "$NPROC" != "0" ] && NFLAG=(-n "$NPROC")

run_variant() {  # name backend envs limit: leaves .rc and .secs in its report folder
    local rdir=$OUTDIR/$1 t=$SECONDS rc
    mkdir -p "$rdir"
    # SIGTERM: resverify stops in order and still writes its report; KILL 20 s later.
    # shellcheck disable=SC2086  # $3 is a list of NAME=VALUE words
    env $3 timeout -k 20 "$4" "$PY" -m resverify.cli.main check \
        --backend "$2" --profile ci --no-plots --report-dir "$rdir" \
        ${NFLAG[@]+"${NFLAG[@]}"} ${CLAIMS[@]+"${CLAIMS[@]}"} \
        ${ARGS[@]+-- "${ARGS[@]}"} > "$rdir/check.log" 2>&1
    rc=$?
    echo "$rc" > "$rdir/.rc"
    echo $((SECONDS - t)) > "$rdir/.secs"
}

RAN=()
collect() {  # one row per variant that ran, in the table's order
    local done_spec name envs what limit rdir rc note
    for done_spec in ${RAN[@]+"${RAN[@]}"}; do
        IFS='|' read -r name envs what limit <<< "$done_spec"
        rdir=$OUTDIR/$name
        rc=$(cat "$rdir/.rc" 2>/dev/null || echo "?")
        note="$what${envs:+ [$envs]}"
        case $rc in
            124|137) note="TIMED OUT after ${limit}s; $note" ;;
        esac
        record "$name" "$rc" "$(cat "$rdir/.secs" 2>/dev/null || echo "?")" "$rdir" "$note"
    done
    RAN=()
}
stop() {  # INT/TERM: stop the running variants (each still writes its report), then record
    local job
    for job in $(jobs -p); do pkill -TERM -P "$job" 2>/dev/null; done
    wait
    collect
    record interrupted 130 $((SECONDS - START)) "" "script interrupted"
    exit 130
}
trap stop INT TERM
for spec in "${VARIANTS[@]}"; do
    IFS='|' read -r name backend envs what limit <<< "$spec"
    limit=${limit:-$STEP_TIMEOUT}
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then continue; fi
    left=$((BUDGET - (SECONDS - START)))
    if [ "$left" -lt 30 ]; then
        record "$name" skipped 0 "" "not run: ${left}s left of the budget ${BUDGET}s"
        continue
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    RAN+=("$name|$envs|$what|$limit")
    if [ "$PARALLEL" = 1 ]; then
        run_variant "$name" "$backend" "$envs" "$limit" &
    else
        run_variant "$name" "$backend" "$envs" "$limit"
    fi
done
wait
collect

# (d) the summary: written by the EXIT trap.
exit 0
