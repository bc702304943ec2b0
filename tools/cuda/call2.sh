set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bin; gunzip -c out/cohort.gz >/tmp/bin/cohort; chmod +x /tmp/bin/cohort
M=/tmp/m4b; t0=$(date +%s)
/tmp/bin/cohort make-model --preset 4b-shape --out $M >/dev/null 2>&1
echo "model at $(( $(date +%s)-t0 ))s"
COHORT_STEP_TIMING=1 timeout -k 5 90 /tmp/bin/cohort bench --model $M --device cuda --batch 1,128,256 --prompt-len 128 --decode-tokens 64 --prefill 1024 --ttft-len 0 >$OUT/bench.txt 2>&1
grep -E 'decode batch|mean over' $OUT/bench.txt | grep -v 'other steps'
echo "bench at $(( $(date +%s)-t0 ))s"
COHORT_STEP_TIMING=1 timeout -k 5 150 /tmp/bin/cohort bench --model $M --device cuda --chat --json $OUT/chat.json >$OUT/chat.txt 2>&1
grep -v 'captured CUDA\|mean over' $OUT/chat.txt | tail -30
echo "chat at $(( $(date +%s)-t0 ))s"
COHORT_CUDA_DETERMINISTIC=1 timeout -k 5 120 /tmp/bin/cohort bench --model $M --device cuda --chat --chat-system 512 --chat-turns 4 --chat-conversations 8 --chat-temperature 0.8 --json $OUT/chat-det.json >$OUT/chat-det.txt 2>&1
grep -v 'captured CUDA\|mean over' $OUT/chat-det.txt | tail -24
echo "end at $(( $(date +%s)-t0 ))s"
