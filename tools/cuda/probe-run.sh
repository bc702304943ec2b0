#!/bin/bash
# One device call that checks the decode buckets and profiles the steps
# (carry out/ with cohort.gz and cuda.test.gz):
#   1. the GPU tests matching $CUDA_TESTS (default: the bucket, padding and
#      graph-replay tests) while the 4b-shape model is made;
#   2. ncu over the steps in $SPECS (tools/cuda/ncu-step.sh; default the
#      last 2048-token chunk of an 8k prompt and a batch-1 decode step),
#      keeping the tables only;
#   3. cohort bench at $BATCHES alternated between $MODES (ab-run.sh,
#      $ROUNDS rounds), with the step timing on.
# Files in $OUT: cuda-tests.txt, table-*.md, bench-*.txt.
export OUT=${OUT:-/tmp/probe-run}
. tools/cuda/run-lib.sh
make_model
CUDA_TESTS=${CUDA_TESTS:-'TestDecodeBucket|TestPadded|TestGraphReplay'} TEST_LIMIT=${TEST_LIMIT:-150} run_suite
grep -E -- '--- (PASS|FAIL|SKIP)' $OUT/cuda-tests.txt | head -30
wait_model
if [ -n "${SPECS-x}" ]; then
	BIN=/tmp/bin SPECS=${SPECS:-prefill:8192:2048:4 decode:1} NCU_LIMIT=${NCU_LIMIT:-240} bash tools/cuda/ncu-step.sh | grep -v '^|.*| 0\.00[0-9] |'
	rm -f $OUT/ncu-*.csv $OUT/ncu-*.err
	at ncu
fi
MODES=${MODES:-"COHORT_STEP_TIMING=1 COHORT_STEP_TIMING=1+COHORT_CUDA_GRAPH_BUCKETS=1"} ROUNDS=${ROUNDS:-1} bash tools/cuda/ab-run.sh 2>&1 | grep -v compiled
for f in $OUT/bench-*.txt; do echo "== $f"; grep -E 'mean over|decode batch' $f | grep -vE 'captured' | tail -12; done
at done
