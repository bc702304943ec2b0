#!/bin/bash
# One device call for the layer scratch (COHORT_CUDA_LAYER_SCRATCH; carry
# out/ with cohort.gz and cuda.test.gz):
#   1. the whole GPU suite (run-lib.sh's run_suite, TEST_LIMIT);
#   2. the scratch serve reserves (its "serving" line, scratch_mib) for each
#      "mode:max-prefill-tokens" of $SERVES;
#   3. cohort bench's prefills (1k, 8k) and batch-1 decode for each
#      "mode:max-prefill-tokens" of $BENCHES.
# Files in $OUT: cuda-tests.txt, serve-*.txt, bench-*.txt.
export OUT=${OUT:-/tmp/scratch-run}
. tools/cuda/run-lib.sh
make_model
[ "${SUITE:-1}" = 1 ] && run_suite
wait_model
for s in ${SERVES:-default:2048 COHORT_CUDA_LAYER_SCRATCH=1:2048 COHORT_CUDA_LAYER_SCRATCH=1:8192}; do
	m=${s%:*} p=${s##*:} n=$(mode_name ${s%:*})-$p
	: >$OUT/serve-$n.txt
	# shellcheck disable=SC2046
	env $(mode_env $m) /tmp/bin/cohort serve --model $M --device cuda --port 0 --max-prefill-tokens $p >$OUT/serve-$n.txt 2>&1 &
	pid=$!
	for _ in $(seq 120); do grep -q 'serving\|rror' $OUT/serve-$n.txt && break; kill -0 $pid 2>/dev/null || break; sleep 1; done
	kill $pid 2>/dev/null; wait $pid 2>/dev/null
	echo "== serve $n: $(grep -E 'serving|rror' $OUT/serve-$n.txt | head -3)"
	at "serve $n"
done
for s in ${BENCHES:-default:2048 COHORT_CUDA_LAYER_SCRATCH=1:2048 COHORT_CUDA_LAYER_SCRATCH=1:8192}; do
	m=${s%:*} p=${s##*:} n=$(mode_name ${s%:*})-$p
	# shellcheck disable=SC2046
	timeout -k 5 "${BENCH_LIMIT:-120}" env $(mode_env $m) /tmp/bin/cohort bench --model $M --device cuda \
		--batch 1 --prompt-len 128 --decode-tokens 64 --prefill 1024,8192 --prefill-runs 3 --ttft-len 1024 --ttft-runs 5 \
		--max-prefill-tokens $p >$OUT/bench-$n.txt 2>&1
	echo "== bench $n: $(grep -E '^decode batch|^prefill|^ttft|^TTFT|rror' $OUT/bench-$n.txt | tr '\n' ' ')"
	at "bench $n"
done
