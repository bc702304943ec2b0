#!/bin/bash
# The sixteenth session's closing device call (carry out/): every bar of
# issues 11 and 12 in one cohort bench run with the session's defaults
# (run-lib.sh's run_allbars), then on an H200 the prefix cache's chat
# benchmark (issue 17), on another card ncu over one 8k prefill step while
# time allows. Files in $OUT: gpu.txt, allbars.txt, bench.json, chat.txt or
# table-*.md.
export OUT=${OUT:-/tmp/s16-third}
. tools/cuda/run-lib.sh
note_gpu
model_ready
BENCH_LIMIT=${BENCH_LIMIT:-200} run_allbars
if grep -q H200 $OUT/gpu.txt; then
	timeout -k 5 "${CHAT_LIMIT:-130}" /tmp/bin/cohort bench --chat --model $M --device cuda >$OUT/chat.txt 2>&1
	grep -E 'hit rate|TTFT|identical|rror' $OUT/chat.txt | head -16
	at chat
elif [ "$(($(date +%s) - t0))" -le "${NCU_BEFORE:-300}" ]; then
	mkdir -p out/bin && cp /tmp/bin/cohort out/bin/ && BIN=out/bin SPECS=prefill:8192:8192:2 NCU_LIMIT=120 bash tools/cuda/ncu-step.sh | tail -40
	rm -f "$OUT"/ncu-*.csv "$OUT"/ncu-*.err
fi
at done
