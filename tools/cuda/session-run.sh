#!/bin/bash
# One device call that checks and measures a session's GPU work (carry
# out/ with cohort and cuda.test; results in $OUT):
#   1. the GPU suite without its two slowest tests, while the 4b-shape model
#      is generated;
#   2. cohort bench: decode at $BATCHES, prefill $PREFILL, TTFT of 1024, and
#      the mixed load (16 decoders, an 8k prompt every second, at 512 and
#      2048 prefill tokens a step);
#   3. $EXTRA, a command (for example a prefix-cache benchmark), with $M4B
#      the model;
#   4. fidelity against HF f32 and bf16 at $LENS (tools/cuda/fidelity.sh's
#      ids, score and ref stages);
#   5. the same binary with each of $AB_ENVS set, at batch $AB_BATCHES.
# In that order, so that a call cut short by the device budget keeps the
# first results.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export OUT=${OUT:-/tmp/session-out}
WORK=/tmp/fidelity
export M4B=$WORK/m4b
mkdir -p "$OUT" "$WORK"
BIN=$(cd "${BIN:-out}" && pwd)
(cd kernels/cuda && timeout -k 5 "${TEST_LIMIT:-110}" "$BIN/cuda.test" -test.v -test.count=1 \
	-test.skip "${SKIP:-TestCompileKernels|TestAttentionPrefillSingle}" >"$OUT/gpu-tests.log" 2>&1
	echo "cuda.test rc=$?" >>"$OUT/gpu-tests.log") &
tests=$!
"$BIN/cohort" make-model --preset 4b-shape --out "$M4B" >/dev/null 2>&1 || echo "make-model failed"
wait $tests
grep -E "^(--- FAIL|FAIL|panic)|cuda.test rc" "$OUT/gpu-tests.log"
echo "passed: $(grep -c '^--- PASS' "$OUT/gpu-tests.log")"
timeout -k 5 "${BENCH_LIMIT:-170}" "$BIN/cohort" bench --model "$M4B" --device cuda --batch "${BATCHES:-1,8,32,128,256}" \
	--prompt-len 128 --decode-tokens 32 --prefill "${PREFILL:-1024,8192}" --ttft-len 1024 --mixed-prefill-tokens 512,2048 \
	--mixed-decoders 16 --mixed-decode-tokens 256 --mixed-prompt 8192 --mixed-period 1s \
	--json "$OUT/bench.json" 2>&1 | grep -v "captured CUDA graph" | tail -24
if [ -n "${EXTRA:-}" ]; then
	echo "=== $EXTRA"
	timeout -k 5 "${EXTRA_LIMIT:-90}" bash -c "$EXTRA" 2>&1 | tail -30
fi
if [ "${FIDELITY:-1}" = 1 ]; then
	BUDGET=${FID_BUDGET:-150} STAGES="ids score ref" LENS=${LENS:-1,128,1024} WORK=$WORK OUT="$OUT" \
		bash tools/cuda/fidelity.sh "$BIN/cohort" >/dev/null 2>&1
	grep -iE "top-8|pass|fail|mean" "$OUT/summary.txt" 2>/dev/null | head -20
fi
for e in ${AB_ENVS:-}; do
	echo "=== $e"
	env "$e" timeout -k 5 60 "$BIN/cohort" bench --model "$M4B" --device cuda --batch "${AB_BATCHES:-1,8}" --prompt-len 128 \
		--decode-tokens 32 --prefill 1024 --ttft-len 0 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ '
done
