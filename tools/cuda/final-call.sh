#!/bin/bash
# The session's last device call (carry out/ with cohort.gz, cuda.test.gz):
# kernels-run.sh (suite, kernel benchmarks, bench with the mixed load, the
# chat benchmark as its extra command) with COHORT_STEP_TIMING=1 on the
# bench, then fidelity at 1, 128 and 1024 tokens.
set -u
export OUT=${OUT:-/tmp/final-call}
bash tools/cuda/kernels-run.sh
mkdir -p /tmp/fidelity && ln -sfn /tmp/m4b /tmp/fidelity/m4b
BUDGET=${FID_BUDGET:-120} STAGES="ids score ref" LENS=${LENS:-1,128,1024} WORK=/tmp/fidelity OUT="$OUT" \
	bash tools/cuda/fidelity.sh /tmp/bin/cohort >/dev/null 2>&1
grep -iE "vs hf" "$OUT/summary.txt" 2>/dev/null | head -16
