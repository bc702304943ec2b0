#!/bin/bash
# One device call for new kernels (carry out/ with cohort.gz, cuda.test.gz):
#   1. the GPU suite (minus the slowest tests) while the 4b-shape model is made;
#   2. the kernel benchmarks named by $BENCH (old and new side by side);
#   3. cohort bench: decode at $BATCHES, prefill 1024 and 8192, the 1k TTFT,
#      and the mixed load at $MIXED prefill tokens a step;
#   4. $EXTRA, a command, with the model at /tmp/m4b.
# The suite's limit: TEST_LIMIT (run-lib.sh).
OUT=${OUT:-/tmp/kernels-run}
. tools/cuda/run-lib.sh
make_model
run_suite
if [ -n "${BENCH:-}" ]; then
	(cd kernels/cuda && timeout -k 5 "${KBENCH_LIMIT:-100}" /tmp/bin/cuda.test -test.run '^$' -test.bench "$BENCH" -test.benchtime 3x -test.v >$OUT/kbench.txt 2>&1)
	grep -E '^Benchmark|ms|ratio' $OUT/kbench.txt | grep -v '^=== ' | head -40
	at "kernel benchmarks"
fi
wait_model
timeout -k 5 "${BENCH_LIMIT:-150}" /tmp/bin/cohort bench --model $M --device cuda --batch "${BATCHES:-1,8,32,128,256}" --prompt-len 128 \
	--decode-tokens 64 --prefill 1024,8192 --ttft-len 1024 --mixed-prefill-tokens "${MIXED:-128,512}" --mixed-decoders 16 \
	--mixed-decode-tokens 256 --mixed-prompt 8192 --mixed-period 1s --json $OUT/bench.json >$OUT/bench.txt 2>&1
grep -v "captured CUDA graph" $OUT/bench.txt | tail -28
at bench
if [ -n "${EXTRA:-}" ]; then
	echo "=== $EXTRA"
	timeout -k 5 "${EXTRA_LIMIT:-90}" bash -c "$EXTRA" >$OUT/extra.txt 2>&1
	grep -v "captured CUDA graph" $OUT/extra.txt | tail -30
	at extra
fi
