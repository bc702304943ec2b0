//go:build cuda

package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"cohort/nccl"
)

// TestBenchChatCUDA is the prefix cache's identity check on the GPU (issue
// 17): the chat benchmark on CUDA ranks at TP 1, 2 and 4 (COHORT_CHAT_TP,
// comma-separated, picks others: the machine needs that many GPUs), greedy
// and seeded conversations, must give the same replies with and without
// the cache, and serve most of the later turns' prompts from it. It runs
// the CUDA backend in deterministic mode (COHORT_CUDA_DETERMINISTIC=1): the
// fast kernels choose their arithmetic by the step's shape, so there two
// runs differ even without the cache (on the H200, tiny preset, TP 1: 18 of
// 32 replies identical with and without the cache, 23 of 32 between two
// uncached runs). The tiny preset keeps it short; the 4b-shape measurement
// is `cohort bench --chat --device cuda --preset 4b-shape`.
func TestBenchChatCUDA(t *testing.T) {
	t.Setenv("COHORT_CUDA_DETERMINISTIC", "1")
	tps := []string{"1", "2", "4"}
	if s := os.Getenv("COHORT_CHAT_TP"); s != "" {
		tps = strings.Split(s, ",")
	}
	gpus, err := nccl.CUDADeviceCount()
	if err != nil {
		t.Skipf("no CUDA devices: %v", err)
	}
	for _, tp := range tps {
		t.Run("tp="+tp, func(t *testing.T) {
			if n, err := strconv.Atoi(tp); err != nil {
				t.Fatalf("COHORT_CHAT_TP: %v", err)
			} else if n > gpus {
				t.Skipf("--tp %s on a host with %d GPU(s)", tp, gpus)
			}
			r, text := runChatBench(t, "--device", "cuda", "--tp", tp, "--preset", "tiny", "--chat-system", "512",
				"--chat-turns", "4", "--chat-turn-tokens", "50", "--chat-reply-tokens", "40", "--chat-conversations", "8",
				"--chat-temperature", "0.8", "--kv-budget-mib", "2048")
			t.Log(text)
			if r.SameReplies != r.ComparedReplies || r.ComparedReplies == 0 {
				t.Errorf("%d of %d replies identical with and without the cache", r.SameReplies, r.ComparedReplies)
			}
			if len(r.Runs) != 2 || r.Runs[1].HitRateAfterFirst < 0.8 {
				t.Errorf("hit rate after the first turn: %+v", r.Runs)
			}
		})
	}
}
