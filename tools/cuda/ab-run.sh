#!/bin/bash
# One device call that alternates cohort bench between modes on one GPU
# (carry out/ with cohort.gz, cuda.test.gz). MODES as in modes-run.sh (a
# mode is VAR=value settings joined by "+", "default" for none); each
# mode's kernels are compiled first, all in parallel, while the 4b-shape
# model is made; then ROUNDS rounds run every mode in turn (cohort bench at
# $BATCHES, plus $FLAGS). Files in $OUT: bench-<mode>-<round>.txt.
export OUT=${OUT:-/tmp/ab-run}
. tools/cuda/run-lib.sh
MODES=${MODES:-default}
make_model
for m in $MODES; do
	# shellcheck disable=SC2046
	(cd kernels/cuda && env $(mode_env $m) timeout -k 5 200 /tmp/bin/cuda.test -test.run '^TestElementwise$' -test.count=1 >/dev/null 2>&1) &
done
wait
at "kernels compiled, model made"
for r in $(seq "${ROUNDS:-2}"); do
	for m in $MODES; do
		n=$(mode_name $m)
		# shellcheck disable=SC2046
		timeout -k 5 "${BENCH_LIMIT:-120}" env $(mode_env $m) /tmp/bin/cohort bench --model $M --device cuda \
			--batch "${BATCHES:-1,8,32}" --prompt-len 128 --decode-tokens 64 --prefill= --ttft-len 0 ${FLAGS:-} \
			>$OUT/bench-$n-$r.txt 2>&1
		echo "== $n round $r: $(grep -E '^decode batch|^prefill|^ttft|^TTFT' $OUT/bench-$n-$r.txt | tr '\n' ' ')"
	done
	at "round $r"
done
