#!/bin/bash
# The sixteenth session's first device call (carry out/ with cohort.gz and
# cuda.test.gz). On an H200, the bars' machine: the GPU suite, the prefix
# cache's chat benchmark (issue 17's last open point) and every bar of issues
# 11 and 12 (run-lib.sh's run_allbars). On any other card: next-run.sh (the
# suite, the cuBLASLt quarter-bucket A/B and ncu over one 8k prefill step).
# Files in $OUT: gpu.txt, cuda-tests.txt, chat.txt, allbars.txt, bench.json,
# or next-run.sh's.
export OUT=${OUT:-/tmp/s16-first}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
if ! grep -q H200 $OUT/gpu.txt; then
	bash tools/cuda/next-run.sh
	rm -f "$OUT"/ncu-*.csv "$OUT"/ncu-*.err # at most eight files come back
	exit
fi
. tools/cuda/run-lib.sh
make_model
TEST_LIMIT=220 run_suite
wait_model
at model
timeout -k 5 "${CHAT_LIMIT:-120}" /tmp/bin/cohort bench --chat --model $M --device cuda >$OUT/chat.txt 2>&1
grep -E 'hit rate|TTFT|identical|rror' $OUT/chat.txt | head -16
at chat
BENCH_LIMIT=$((590 - $(date +%s) + t0)) run_allbars
at done
