#!/bin/bash
# The sixteenth session's last device call (carry out/): the final tree's
# binary end to end (quarter-octave cuBLASLt buckets and the 32-column state
# pass by default): batch-1 decode, the 1k prefill and TTFT, and the mixed
# load at 128 prefill tokens a step. Files in $OUT: gpu.txt, last.txt.
export OUT=${OUT:-/tmp/s16-last}
. tools/cuda/run-lib.sh
note_gpu
model_ready
timeout -k 5 "${LAST_LIMIT:-120}" /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 32 --prefill 1024 \
	--prefill-runs 3 --ttft-len 1024 --ttft-runs 5 --mixed-prefill-tokens 128 >$OUT/last.txt 2>&1
grep -E '^decode batch|^prefill|^TTFT|^mixed load|rror|panic' $OUT/last.txt | head
at done
