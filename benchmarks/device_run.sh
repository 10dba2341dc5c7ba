#!/usr/bin/env bash
# One GPU session for the kernels: their GPU tests (three pytest processes in parallel, so the first-use compiles
# use several CPU cores), then the whole benchmark table. Run from the repository root:
#
#     bash benchmarks/device_run.sh [OUT_DIR] [--tests-only]      # OUT_DIR default: $OUT, else ./device_out
#
# Budget on a fresh H200 (cold Triton cache): tests <= 4 min, benchmarks <= 5.7 min (each under `timeout`, 580 s in all).
# Writes OUT_DIR/tests_*.log, OUT_DIR/third_party{.log,_gpu.json} (with the thirdparty extra installed),
# OUT_DIR/bench/bench.{md,json,csv,txt} and prints the test totals and the table.
set -u
OUT_DIR="${1:-${OUT:-device_out}}"
mkdir -p "$OUT_DIR/bench"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(pwd)/python"
PYTEST=(python -m pytest -q -m gpu -p no:cacheprovider)

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader || true
start=$(date +%s)
timeout 240 "${PYTEST[@]}" tests/kernels/test_kernels_matmul.py >"$OUT_DIR/tests_matmul.log" 2>&1 &
timeout 240 "${PYTEST[@]}" tests/kernels/test_kernels_blockscaled.py >"$OUT_DIR/tests_blockscaled.log" 2>&1 &
timeout 240 "${PYTEST[@]}" tests/kernels/test_torch_ops.py tests/kernels/test_torch_ops_weight_only.py tests/kernels/test_kernels_launcher.py \
    tests/formats/test_formats_cuda.py tests/examples/test_gpu_examples.py >"$OUT_DIR/tests_other.log" 2>&1 &
# the Gluon mixed GEMM's configs (each a first-use compile) in a process of their own
timeout 240 "${PYTEST[@]}" tests/kernels/test_kernels_gluon_mixed.py >"$OUT_DIR/tests_gluon_mixed.log" 2>&1 &
# every other GPU-marked test of the suite, in two processes (one took past 240 s beside the others): the rest of
# tests/kernels, then everything outside it (language helpers, passes, CLC fallback, models, tmem ...)
timeout 240 "${PYTEST[@]}" tests/kernels --ignore=tests/kernels/test_kernels_matmul.py --ignore=tests/kernels/test_kernels_blockscaled.py \
    --ignore=tests/kernels/test_torch_ops.py --ignore=tests/kernels/test_torch_ops_weight_only.py --ignore=tests/kernels/test_kernels_launcher.py \
    --ignore=tests/kernels/test_kernels_gluon_mixed.py >"$OUT_DIR/tests_rest_kernels.log" 2>&1 &
timeout 240 "${PYTEST[@]}" tests --ignore=tests/kernels --ignore=tests/formats/test_formats_cuda.py \
    --ignore=tests/examples/test_gpu_examples.py >"$OUT_DIR/tests_rest.log" 2>&1 &
# the third-party H200 column (plain Triton vs bwtriton.enable(), tools/third_party.py) beside the tests, where the
# `thirdparty` libraries are importable; only gpu.json comes back (the kernels' PTX stay in /tmp)
if python -c "import gemlite, fla, liger_kernel" 2>/dev/null; then
    (timeout 230 python tools/third_party.py run --gpu --jobs 6 --out /tmp/third_party >"$OUT_DIR/third_party.log" 2>&1;
     cp /tmp/third_party/gpu.json "$OUT_DIR/third_party_gpu.json" 2>/dev/null) &
fi
wait
for log in "$OUT_DIR"/tests_*.log; do
    echo "== $log: $(tail -n 1 "$log")"
    grep -E "^(FAILED|ERROR)" "$log" | head -n 20
done
echo "tests took $(( $(date +%s) - start )) s"
[ "${2:-}" = "--tests-only" ] && exit 0

timeout 340 python benchmarks/run_all.py --out "$OUT_DIR/bench" >"$OUT_DIR/bench.log" 2>&1
echo "benchmarks exit $? after $(( $(date +%s) - start )) s in total (progress: $OUT_DIR/bench.log)"
grep -E "ERROR|Traceback" "$OUT_DIR/bench.log" | head -n 10
cat "$OUT_DIR/bench/bench.md" 2>/dev/null || tail -n 40 "$OUT_DIR/bench.log"
