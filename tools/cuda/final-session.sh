#!/bin/bash
# One device call that checks a session's work (carry out/ with
# cohort.gz, cuda.test.gz and cohort.test.gz, gzip'd so that the three fit
# the 64 MiB a call carries): the GPU tests named by $CUDA_TESTS (kernels)
# and $CMD_TESTS (cmd/cohort), the 4b-shape model made meanwhile, then
# cohort bench as shipped and the prefill again with each of $AB_ENVS.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/final-session}
mkdir -p "$OUT" /tmp/bin
for b in cohort cuda.test cohort.test; do gunzip -c out/$b.gz >/tmp/bin/$b && chmod +x /tmp/bin/$b; done
M=/tmp/m4b
t0=$(date +%s)
/tmp/bin/cohort make-model --preset 4b-shape --out $M >/dev/null 2>&1 &
mk=$!
(cd kernels/cuda && timeout -k 5 "${TEST_LIMIT:-90}" /tmp/bin/cuda.test -test.v -test.count=1 -test.run "${CUDA_TESTS:-.}" >$OUT/cuda-tests.txt 2>&1
	echo "cuda.test rc=$?" >>$OUT/cuda-tests.txt)
grep -E -- '^(--- FAIL|FAIL|panic)|rc=' $OUT/cuda-tests.txt | head -20; echo "cuda passed: $(grep -c -- '^--- PASS' $OUT/cuda-tests.txt)"
if [ -n "${CMD_TESTS:-}" ]; then
	(cd cmd/cohort && timeout -k 5 "${CMD_LIMIT:-120}" /tmp/bin/cohort.test -test.v -test.count=1 -test.run "$CMD_TESTS" >$OUT/cmd-tests.txt 2>&1
		echo "cohort.test rc=$?" >>$OUT/cmd-tests.txt)
	grep -E -- '^(--- |FAIL|panic)|rc=|scratch|reserv' $OUT/cmd-tests.txt | head -20
fi
wait $mk; echo "tests and model at $(( $(date +%s)-t0 ))s"
timeout -k 5 "${BENCH_LIMIT:-130}" /tmp/bin/cohort bench --model $M --device cuda --batch "${BATCHES:-1,8,32,128,256}" --prompt-len 128 \
	--decode-tokens 32 --prefill 1024,8192 --ttft-len 1024 --json $OUT/bench.json 2>&1 | grep -v "captured CUDA graph" | tail -16
echo "bench at $(( $(date +%s)-t0 ))s"
for e in ${AB_ENVS:-}; do
	echo "=== $e"
	(cd kernels/cuda && env "$e" timeout -k 5 40 /tmp/bin/cuda.test -test.count=1 -test.run 'GDN|Chunk' 2>&1 | tail -1)
	env "$e" timeout -k 5 60 /tmp/bin/cohort bench --model $M --device cuda --batch 1 --prompt-len 128 --decode-tokens 16 \
		--prefill 1024,8192 --ttft-len 1024 2>&1 | grep -E '^prefill|median'
done
echo "end at $(( $(date +%s)-t0 ))s"
