#!/bin/bash
# The one device call for issue 6 when device time is short (about four
# minutes): the GPU test suite and a compute-sanitizer memcheck of a tiny
# model (prefill and graph-replayed decode) run in the background while
# fidelity.sh generates the 4b-shape model, then fidelity.sh runs its 4b
# stages (score, HF bf16 and f32 references, HF generate baseline, cohort bench)
# under BUDGET. Carry $BIN (default out/) holding cohort and cuda.test (see
# docs/gpu.md). Writes gpu-tests.log plus fidelity.sh's files to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/issue6-out}
mkdir -p "$OUT"
root=$(pwd)
BIN=$(cd "${BIN:-out}" && pwd)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(
	cd kernels/cuda && timeout -k 5 "${TEST_LIMIT:-150}" "$BIN/cuda.test" -test.v -test.count=1 >/tmp/gpu-tests.log 2>&1
	echo "cuda.test rc=$?" >>/tmp/gpu-tests.log
) &
(
	timeout -k 5 "${SANITIZER_LIMIT:-120}" "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 \
		"$BIN/cohort" generate --device cuda --max-tokens 12 --prompt "The quick brown fox" >/tmp/sanitizer.log 2>&1
	echo "compute-sanitizer memcheck rc=$?" >>/tmp/sanitizer.log
) &
BUDGET=${BUDGET:-270} STAGES=${STAGES:-model ids score ref hfbench bench} HF_DTYPES=${HF_DTYPES:-bf16,f32} \
	HF_BATCHES=${HF_BATCHES:-1,8} HF_BUDGET=${HF_BUDGET:-45} OUT="$OUT" bash tools/cuda/fidelity.sh "$BIN/cohort" >/dev/null
wait
{
	grep -E '^(--- |ok|FAIL|PASS|panic)|relative difference|top-8|graphs captured|greedy|cuda.test rc' /tmp/gpu-tests.log
	echo
	tail -25 /tmp/sanitizer.log
} >"$OUT/gpu-tests.log"
cat "$OUT/gpu-tests.log" | grep -vE 'relative difference' | tail -40
cat "$OUT/summary.txt" 2>/dev/null
cp /tmp/gpu-tests.log "$OUT/gpu-tests-full.log"
