#!/bin/bash
# The seventeenth session's first device call, as the sixteenth left it
# (carry out/ with cohort.gz and cuda.test.gz built from main):
#   1. the whole GPU suite (run-lib.sh's run_suite; the wide state pass is
#      the default since phase 17, quarter-octave cuBLASLt buckets too);
#   2. every bar of issues 11 and 12 in one cohort bench run (run_allbars);
#   3. on an H200: the prefix cache's chat benchmark (issue 17's last open
#      point); on another card: an 8k prompt with COHORT_STEP_TIMING=steps,
#      whose per-step lines split the engine's 168 ms (phase 17, an H100)
#      into the rank's host forward call and its wait for the device, against
#      157 ms of kernels under ncu.
# Files in $OUT: gpu.txt, cuda-tests.txt, allbars.txt, bench.json, and
# chat.txt or steps8k.txt.
export OUT=${OUT:-/tmp/next-run}
. tools/cuda/run-lib.sh
note_gpu
make_model
TEST_LIMIT=${TEST_LIMIT:-210} run_suite
wait_model
at model
BENCH_LIMIT=${BENCH_LIMIT:-180} run_allbars
if grep -q H200 "$OUT/gpu.txt"; then
	timeout -k 5 "${CHAT_LIMIT:-120}" /tmp/bin/cohort bench --chat --model $M --device cuda >$OUT/chat.txt 2>&1
	grep -E 'hit rate|TTFT|identical|rror' $OUT/chat.txt | head -16
	at chat
else
	COHORT_STEP_TIMING=steps timeout -k 5 90 /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 4 \
		--prefill 8192 --prefill-runs 3 --ttft-len 0 >$OUT/steps8k.txt 2>&1
	grep -E 'other step|^prefill|rror' $OUT/steps8k.txt | head -16
	at steps8k
fi
at done
