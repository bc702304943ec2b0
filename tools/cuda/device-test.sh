#!/bin/sh
# Runs the CUDA backend's tests on a GPU machine. From the repository root,
# after `make build-cuda` (carry bin/ to the machine):
#
#	tools/cuda/device-test.sh [path/to/cuda.test] [-sanitize]
#
# 1. TestCompileKernels with NVRTC found through the backend's default search
#    (no LD_LIBRARY_PATH), to check that the default paths work there;
# 2. the whole suite, verbose (every measured error is logged);
# 3. with -sanitize, compute-sanitizer memcheck and racecheck over the kernel
#    tests.
# Full logs go to $OUT (the device tool's output folder) or /tmp; a summary
# is printed.
set -u
export NCCL_NVLS_ENABLE=0
logs=${OUT:-/tmp}
bin=$(realpath "${1:-bin/cuda.test}")
sanitize=${2:-}
cd "$(dirname "$0")/../../kernels/cuda" || exit 1

nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
ls /usr/local/cuda/lib64 2>/dev/null | grep -E '^lib(nvrtc|cublasLt)\.so' | tr '\n' ' '
echo

"$bin" -test.run '^TestCompileKernels$' -test.v >"$logs/compile.log" 2>&1
if ! grep -q '^--- PASS: TestCompileKernels' "$logs/compile.log"; then
	echo "TestCompileKernels failed with the default search; retrying everything with LD_LIBRARY_PATH"
	tail -20 "$logs/compile.log"
	export LD_LIBRARY_PATH=/usr/local/cuda/lib64
fi

# Each top-level test runs in its own process, so that a panic (the ops
# panic on CUDA errors) cannot hide the results of the others.
start=$(date +%s)
rc=0
: >"$logs/test.log"
for name in $("$bin" -test.list '.*' | grep '^Test'); do
	if ! "$bin" -test.run "^$name\$" -test.v -test.count=1 -test.timeout=3m >>"$logs/test.log" 2>&1; then
		rc=1
		echo "FAILED: $name"
	fi
done
echo "suite: exit $rc in $(($(date +%s) - start)) s"
grep -E '^\s*(--- (FAIL|SKIP)|FAIL|panic:|\S+\.go:[0-9]+: .*(>|not|differ|error|Error))' "$logs/test.log" | head -60
grep -E 'cuda: device|NVRTC [0-9]+\.[0-9]+: ' "$logs/test.log" | sort -u | head -4
echo "max relative differences per test:"
awk '/^=== (RUN|NAME|CONT)/ {name=$3} /relative difference/ {for (i=1;i<=NF;i++) if ($i=="difference") {v=$(i+1)+0; if (!(name in m) || v>m[name]) m[name]=v}} END {for (n in m) printf "  %-60s %.3g\n", n, m[n]}' "$logs/test.log" | sort | awk '{split($1,a,"/"); top=a[1]; if (!(top in best) || $2+0 > best[top]+0) best[top]=$2} END {for (t in best) printf "  %-40s %s\n", t, best[t]}' | sort
grep -E 'Δlogit|greedy continuation' "$logs/test.log" | sed 's/^ *//' | sort | uniq -c | sort -rn | head -12
grep -E '^--- (PASS|FAIL|SKIP)' "$logs/test.log" | tail -25

if [ "$sanitize" = "-sanitize" ] && command -v compute-sanitizer >/dev/null; then
	kernels='^Test(Attention|GDN|Norms|RoPE|Embedding|SplitQueryGate|Elementwise)'
	timeout 120 compute-sanitizer --tool memcheck --print-limit 10 "$bin" -test.run "$kernels" >"$logs/memcheck.log" 2>&1
	echo "memcheck: exit $?"; grep -E 'ERROR SUMMARY|^(ok|PASS|FAIL)' "$logs/memcheck.log" | tail -3
	timeout 90 compute-sanitizer --tool racecheck --print-limit 10 "$bin" -test.run '^Test(Attention|GDN|Norms)' >"$logs/racecheck.log" 2>&1
	echo "racecheck: exit $?"; grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|^(ok|PASS|FAIL)' "$logs/racecheck.log" | tail -3
fi
exit $rc
