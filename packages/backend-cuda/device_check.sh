#!/usr/bin/env bash
# The checks of riftco-backend-cuda on a machine with an NVIDIA GPU (an H200 with
# the CUDA 13 driver, PyTorch and the NVIDIA wheels in its python3), in about 5
# minutes (the step limits below add to 290 s, inside a 300 s budget). Run from the repository root with the wheels of this checkout built
# into build/wheelhouse (tools/build_wheels.py) and carried along:
#
#     bash packages/backend-cuda/device_check.sh
#
# It installs the riftco wheels into a private folder, then runs, each under its
# own time limit inside one overall budget: riftco-tensor's op suite on cuda
# (bfloat16 included), this package's tests (a tiny model in float32 and in
# bfloat16 mixed precision, `small` pretraining: 50 steps in f32, 30 in bf16, QLoRA
# steps and batch-1 decode, all against the CPU), `riftco pretrain --precision
# bf16` on cuda, a 10-second microbench of one layer's attention forward and
# backward and one GEMM against torch SDPA and matmul (`bench_cuda.py --micro`),
# bench/bench_cuda.py against PyTorch on GPT-2 124M shapes with
# `--precision bf16`, then `--precision f32`, and, with time left,
# riftco-backend-tpu's suite on XLA's CUDA PJRT plugin. Logs go to $OUT (default
# /tmp/riftco-device-check).
# The exit status is that of the first failed check (0 when all passed).

set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/riftco-device-check}
WHEELHOUSE=${WHEELHOUSE:-build/wheelhouse}
SITE=${RIFTCO_SITE:-/tmp/riftco-site}
BUDGET=${BUDGET_SECONDS:-300}
START=$(date +%s)
STATUS=0
mkdir -p "$OUT"

export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export RIFTCO_CUDA_CACHE=${RIFTCO_CUDA_CACHE:-/tmp/riftco-cuda-cache}

log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/summary.txt"; }

# run NAME SECONDS COMMAND...: COMMAND under the smaller of SECONDS and what is
# left of the budget, its output in $OUT/NAME.log and its last line in the summary.
run() {
    local name=$1 limit=$2
    shift 2
    local left=$(( BUDGET - ($(date +%s) - START) ))
    if (( left < 20 )); then
        log "$name: skipped, ${left}s of the budget left"
        return 0
    fi
    (( limit > left )) && limit=$left
    log "$name: start (limit ${limit}s)"
    timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    log "$name: exit $rc; $(grep -v '^\s*$' "$OUT/$name.log" | tail -n 1)"
    if (( rc != 0 && STATUS == 0 )); then
        STATUS=$rc
    fi
    return 0
}

shopt -s nullglob
wheels=("$WHEELHOUSE"/riftco*.whl)
if (( ${#wheels[@]} == 0 )); then
    echo "no riftco wheels in $WHEELHOUSE: build them with tools/build_wheels.py and carry the folder" >&2
    exit 2
fi
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "${wheels[@]}" || exit 2
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    "$PY" - <<'PYEOF'
import riftco.backends.cuda as cuda
import riftco.tensor as rt
for stem, usable, where in cuda.library_status():
    print(f"{stem}: {'ok' if usable else 'MISSING'} {where}")
for info in rt.backends():
    print(f"{info.name}: {'available' if info.available else 'unavailable'} {info.reason}")
if any(i.name == "cuda" and i.available for i in rt.backends()):
    print(rt.get_backend("cuda").describe())
PYEOF
} >"$OUT/backends.txt" 2>&1
log "backends: $(grep '^cuda:' "$OUT/backends.txt" | tail -n 1)"

PYTEST=("$PY" -m pytest -q -p no:cacheprovider --maxfail=25)

# Every capability against its numpy formula, on cuda (test_bfloat16.py included).
run tensor-suite 70 "${PYTEST[@]}" packages/tensor/tests -k cuda
# This package: discovery, the NVRTC compile check, the tiny model (f32 and bf16),
# the jobs (f32 and bf16 pretraining). The host emulation of the kernels,
# test_on_emulator.py, and the counted budgets, test_budgets.py, are CI's; not here.
run cuda-tests 70 "${PYTEST[@]}" packages/backend-cuda/tests \
    --ignore=packages/backend-cuda/tests/test_on_emulator.py \
    --ignore=packages/backend-cuda/tests/test_budgets.py \
    --deselect packages/backend-cuda/tests/test_on_gpu.py::test_shared_tensor_suite_runs_on_cuda
# The command a user runs: 20 steps of a `small`-shaped model in bf16 on cuda (the
# bundle and checkpoint go to /tmp, the log to $OUT).
run pretrain-bf16 35 env RIFTCO_BACKEND=cuda "$PY" -m riftco.cli pretrain --precision bf16 \
    --steps 20 --warmup 5 --d-model 384 --layers 6 --heads 6 --d-ff 1536 --context 256 \
    --batch-size 8 --eval-every 0 --eval-batches 2 --sample '' --out /tmp/riftco-pretrain-bf16
# One layer's attention (forward and backward) and one GEMM against torch, 10 s.
run micro 25 "$PY" bench/bench_cuda.py --micro 10
# Throughput next to PyTorch (figures only): bf16 first (the target), then f32.
run bench-bf16 55 "$PY" bench/bench_cuda.py --precision bf16 --batch 4 --steps 3 --rounds 2 \
    --decode 32
run bench-f32 35 "$PY" bench/bench_cuda.py --precision f32 --batch 4 --steps 2 --rounds 1 \
    --decode 0

# riftco-backend-tpu's suite on XLA's CUDA plugin, with what time is left.
plugin=$("$PY" - <<'PYEOF'
import pathlib, sys
found = [f for p in sys.path for f in sorted(pathlib.Path(p or ".").glob("jax_plugins/*/xla_cuda_plugin.so"))]
print(found[0] if found else "")
PYEOF
)
if [[ -n "$plugin" ]]; then
    run tpu-on-xla-cuda 120 env RIFTCO_PJRT_PLUGIN="$plugin" RIFTCO_TPU_TEST_PLUGIN="$plugin" \
        "${PYTEST[@]}" packages/backend-tpu/tests/test_on_xla_cpu.py
else
    log "tpu-on-xla-cuda: skipped, no xla_cuda_plugin.so (jax-cuda13-pjrt) found"
fi

log "done in $(( $(date +%s) - START ))s, status $STATUS"
exit "$STATUS"
