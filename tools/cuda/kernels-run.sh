#!/bin/bash
# One device call for new kernels (carry out/ with cohort.gz, cuda.test.gz):
#   1. the GPU suite (minus the slowest tests) while the 4b-shape model is made;
#   2. the kernel benchmarks named by $BENCH (old and new side by side);
#   3. cohort bench: decode at $BATCHES, prefill 1024 and 8192, the 1k TTFT,
#      and the mixed load at $MIXED prefill tokens a step;
#   4. $EXTRA, a command, with the model at /tmp/m4b.
# The suite's limit (TEST_LIMIT, default 240 s) covers NVRTC's compile of
# the kernels on a fresh machine (about 40 s before the first test) and the
# suite (compile included, 146 s in one H200 call of 2026-12-02 and past
# 150 s in the next).
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/kernels-run}
mkdir -p "$OUT" /tmp/bin
for b in cohort cuda.test; do gunzip -c out/$b.gz >/tmp/bin/$b && chmod +x /tmp/bin/$b; done
M=/tmp/m4b
t0=$(date +%s)
/tmp/bin/cohort make-model --preset 4b-shape --out $M >/dev/null 2>&1 &
mk=$!
(cd kernels/cuda && timeout -k 5 "${TEST_LIMIT:-240}" /tmp/bin/cuda.test -test.v -test.count=1 -test.run "${CUDA_TESTS:-.}" \
	-test.skip "${SKIP:-TestCompileKernels|TestAttentionPrefillSingle}" >$OUT/cuda-tests.txt 2>&1
	echo "cuda.test rc=$?" >>$OUT/cuda-tests.txt)
grep -E -- '^(--- FAIL|FAIL|panic)|^    --- FAIL|rc=' $OUT/cuda-tests.txt | head -24; echo "cuda passed: $(grep -c -- '--- PASS' $OUT/cuda-tests.txt)"
echo "tests at $(( $(date +%s)-t0 ))s"
if [ -n "${BENCH:-}" ]; then
	(cd kernels/cuda && timeout -k 5 "${KBENCH_LIMIT:-100}" /tmp/bin/cuda.test -test.run '^$' -test.bench "$BENCH" -test.benchtime 3x -test.v >$OUT/kbench.txt 2>&1)
	grep -E '^Benchmark|ms|ratio' $OUT/kbench.txt | grep -v '^=== ' | head -40
	echo "kernel benchmarks at $(( $(date +%s)-t0 ))s"
fi
wait $mk
timeout -k 5 "${BENCH_LIMIT:-150}" /tmp/bin/cohort bench --model $M --device cuda --batch "${BATCHES:-1,8,32,128,256}" --prompt-len 128 \
	--decode-tokens 64 --prefill 1024,8192 --ttft-len 1024 --mixed-prefill-tokens "${MIXED:-128,512}" --mixed-decoders 16 \
	--mixed-decode-tokens 256 --mixed-prompt 8192 --mixed-period 1s --json $OUT/bench.json >$OUT/bench.txt 2>&1
grep -v "captured CUDA graph" $OUT/bench.txt | tail -28
echo "bench at $(( $(date +%s)-t0 ))s"
if [ -n "${EXTRA:-}" ]; then
	echo "=== $EXTRA"
	timeout -k 5 "${EXTRA_LIMIT:-90}" bash -c "$EXTRA" >$OUT/extra.txt 2>&1
	grep -v "captured CUDA graph" $OUT/extra.txt | tail -30
	echo "extra at $(( $(date +%s)-t0 ))s"
fi
