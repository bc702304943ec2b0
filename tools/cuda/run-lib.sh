# Shared by the one-call device scripts (kernels-run.sh, modes-run.sh,
# profile-run.sh); source it from the repository root with OUT set. It sets
# the environment, unpacks the carried out/cohort.gz and out/cuda.test.gz
# (or ${BINS}/*.gz) into /tmp/bin, and defines:
#   at MSG          MSG after the seconds since the script began;
#   mode_env MODE   a mode's settings (VAR=value joined by "+", "default"
#                   for none) as env arguments; mode_name MODE a file name
#                   for it ("+" is not one the device tool brings back);
#   make_model      starts making the 4b-shape model at $M unless it is
#                   there; wait_model waits for it; model_ready does both
#                   and notes the time;
#   note_gpu        the card's name and memory, also into $OUT/gpu.txt;
#   run_fidelity M  fidelity against HF f32 and bf16 at $LENS (fidelity.sh's
#                   ids, score and ref stages on the model at $M) for each
#                   mode M (default: none), its comparisons into
#                   $OUT/fid-<mode>.txt; untimed, so it may run beside the
#                   suite;
#   run_suite       the GPU tests matching $CUDA_TESTS (default all, less
#                   $SKIP) within $TEST_LIMIT seconds (default 240: NVRTC's
#                   compile of the kernels on a fresh machine, about 40 s,
#                   and the suite, 146 s in one H200 call of 2026-12-02 and
#                   past 150 s in the next), into $OUT/cuda-tests.txt, and
#                   a summary;
#   run_tests LIMIT PATTERN  the GPU tests matching PATTERN, -short, within
#                   LIMIT seconds, into $OUT/tests.txt, and a summary;
#   run_chat        on an H200 (after note_gpu), the prefix cache's chat
#                   benchmark (issue 17) into $OUT/chat.txt; elsewhere
#                   nothing (the issue asks for the H200);
#   run_allbars     every bar of issues 11 and 12 in one cohort bench run
#                   with the step timing on (decode 1, 8, 32, 128, 256;
#                   prefill 1k and 8k; the 1k TTFT; the mixed load at 128 and
#                   256 prefill tokens a step), within $BENCH_LIMIT seconds
#                   (default 200), into $OUT/allbars.txt and $OUT/bench.json,
#                   and a summary.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT" /tmp/bin
for b in cohort cuda.test; do gunzip -c "${BINS:-out}/$b.gz" >/tmp/bin/$b && chmod +x /tmp/bin/$b; done
M=/tmp/m4b
t0=$(date +%s)
mk=
at() { echo "[$(($(date +%s) - t0))s] $*"; }
mode_env() { [ "$1" = default ] && return; echo "$1" | tr '+' ' '; }
mode_name() { echo "$1" | sed 's/COHORT_CUDA_//g; s/=/-/g; s/+/_/g'; }
make_model() {
	if [ ! -s $M/model.safetensors ]; then
		/tmp/bin/cohort make-model --preset 4b-shape --out $M >/dev/null 2>&1 &
		mk=$!
	fi
}
wait_model() { [ -z "$mk" ] || wait $mk 2>/dev/null; }
model_ready() {
	make_model
	wait_model
	at model
}
note_gpu() { nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"; }
run_fidelity() {
	mkdir -p /tmp/fidelity && ln -sfn $M /tmp/fidelity/m4b
	for m in "${@:-default}"; do
		n=$(mode_name $m)
		# shellcheck disable=SC2046
		env $(mode_env $m) BUDGET=${FID_BUDGET:-220} STAGES="ids score ref" LENS=${LENS:-1,128,1024} WORK=/tmp/fidelity \
			OUT=/tmp/fid-$n bash tools/cuda/fidelity.sh /tmp/bin/cohort >/dev/null 2>&1
		grep -E 'vs hf-' /tmp/fid-$n/summary.txt >$OUT/fid-$n.txt 2>&1 || cp /tmp/fid-$n/summary.txt $OUT/fid-$n.txt
	done
}
run_suite() {
	(cd kernels/cuda && timeout -k 5 "${TEST_LIMIT:-240}" /tmp/bin/cuda.test -test.v -test.count=1 -test.run "${CUDA_TESTS:-.}" \
		-test.skip "${SKIP:-TestCompileKernels|TestAttentionPrefillSingle}" >$OUT/cuda-tests.txt 2>&1
		echo "cuda.test rc=$?" >>$OUT/cuda-tests.txt)
	grep -E -- '^(--- FAIL|FAIL|panic)|^    --- FAIL|rc=' $OUT/cuda-tests.txt | head -24
	echo "cuda passed: $(grep -c -- '--- PASS' $OUT/cuda-tests.txt)"
	at tests
}
run_tests() {
	(cd kernels/cuda && timeout -k 5 "$1" /tmp/bin/cuda.test -test.v -test.count=1 -test.short -test.run "$2" \
		>$OUT/tests.txt 2>&1; echo "rc=$?" >>$OUT/tests.txt)
	grep -E -- '^--- |rc=|differs|want' $OUT/tests.txt | head -20
	at tests
}
run_chat() {
	grep -q H200 "$OUT/gpu.txt" || return 0
	wait_model
	timeout -k 5 "${CHAT_LIMIT:-120}" /tmp/bin/cohort bench --chat --model $M --device cuda >$OUT/chat.txt 2>&1
	grep -E 'hit rate|TTFT|identical|rror' $OUT/chat.txt | head -16
	at chat
}
run_allbars() {
	COHORT_STEP_TIMING=1 timeout -k 5 "${BENCH_LIMIT:-200}" /tmp/bin/cohort bench --model $M --device cuda \
		--batch 1,8,32,128,256 --prompt-len 128 --decode-tokens 64 --prefill 1024,8192 --prefill-runs 3 \
		--ttft-len 1024 --ttft-runs 5 --mixed-prefill-tokens 128,256 --json $OUT/bench.json >$OUT/allbars.txt 2>&1
	grep -E 'recorded the decode|^decode batch|^prefill|TTFT|mixed|p99|rank 0: mean over 30 decode|scheduler: mean over 30 decode|rror' $OUT/allbars.txt | head -40
	tail -32 $OUT/allbars.txt
	at allbars
}
