#!/bin/bash
# The eighteenth session's third device call (carry out/ as for the
# second): the per-kernel ncu tables of one decode step at batch 1 and 32
# and of an 8k prompt in one step, with main's defaults (the wgmma flash
# entries since phase 19), for docs/gpu-profile.md (issue 11 item 1, issue
# 12 item 3). Files in $OUT: gpu.txt and table-*.md.
export OUT=${OUT:-/tmp/s18-third}
. tools/cuda/run-lib.sh
note_gpu
BIN=/tmp/bin OUT=/tmp/ncu SPECS="${SPECS:-decode:1 decode:32 prefill:8192:8192:2}" NCU_LIMIT=${NCU_LIMIT:-180} \
	bash tools/cuda/ncu-step.sh >/dev/null 2>&1
for f in /tmp/ncu/table-*.md; do cp "$f" "$OUT/"; echo "== $f"; head -14 "$f"; done
grep -h "rc=" /tmp/ncu/*.err 2>/dev/null | head
