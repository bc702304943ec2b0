#!/bin/bash
# One device call (carry out/ with cohort.gz and cuda.test.gz):
#   1. the GPU tests matching $CUDA_TESTS (run-lib.sh's run_suite), and the
#      ones matching $L2_TESTS again with COHORT_CUDA_L2_NEXT=1;
#   2. the mixed load (cohort bench --mixed-prefill-tokens $MIXED, step
#      timing on) for each mode of $MIXED_MODES;
#   3. ab-run.sh over $MODES (BATCHES, ROUNDS) if $MODES is set;
#   4. with CHAT set, the chat benchmark of the prefix cache (cohort bench
#      --chat, the shape) at each --max-prefill-tokens of $CHAT.
# Files in $OUT: cuda-tests.txt, l2-tests.txt, mixed-*.txt, bench-*.txt,
# chat-*.txt.
export OUT=${OUT:-/tmp/mixed-run}
. tools/cuda/run-lib.sh
make_model
CUDA_TESTS=${CUDA_TESTS:-TestGDN|TestGatedDeltaRule|TestModel|TestGraph|TestDecodeBuckets|TestLayerScratch} run_suite
if [ -n "${L2_TESTS:-}" ]; then
	(cd kernels/cuda && COHORT_CUDA_L2_NEXT=1 timeout -k 5 120 /tmp/bin/cuda.test -test.v -test.count=1 -test.run "$L2_TESTS" >$OUT/l2-tests.txt 2>&1
		echo "rc=$?" >>$OUT/l2-tests.txt)
	echo "L2_NEXT tests: $(grep -c -- '--- PASS' $OUT/l2-tests.txt) passed, $(grep -E -- '--- FAIL|^panic|rc=' $OUT/l2-tests.txt | tr '\n' ' ')"
fi
wait_model
at model
for m in ${MIXED_MODES:-default}; do
	n=$(mode_name $m)
	# shellcheck disable=SC2046
	COHORT_STEP_TIMING=1 timeout -k 5 "${MIXED_LIMIT:-120}" env $(mode_env $m) /tmp/bin/cohort bench --model $M --device cuda \
		--batch 1 --prompt-len 128 --decode-tokens 16 --prefill= --ttft-len 0 --mixed-prefill-tokens "${MIXED:-128}" \
		>$OUT/mixed-$n.txt 2>&1
	echo "== $n: $(grep -E '^mixed load, max|rror' $OUT/mixed-$n.txt | tr '\n' ' ')"
	at "mixed $n"
done
[ -n "${MODES:-}" ] && bash tools/cuda/ab-run.sh 2>&1 | grep -v compiled
for p in ${CHAT:-}; do
	timeout -k 5 "${CHAT_LIMIT:-150}" /tmp/bin/cohort bench --chat --model $M --device cuda --max-prefill-tokens $p >$OUT/chat-$p.txt 2>&1
	echo "== chat, max-prefill-tokens $p:"; grep -E 'hit rate|TTFT|identical|rror' $OUT/chat-$p.txt | head -12
	at "chat $p"
done
at done
