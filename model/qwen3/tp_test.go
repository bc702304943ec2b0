package qwen3_test

import (
	"strings"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/kernels/cpu"
	"cohort/model"
)

// TestTensorParallelMatchesSingle: TP=2 and TP=4 (KV heads replicated at
// 4) match TP=1.
func TestTensorParallelMatchesSingle(t *testing.T) {
	ck := openTiny(t)
	archtest.TPMatchesSingle(t, ck, archtest.Prompt(100, ck.Config.VocabSize, 3), nil)
}

func TestTensorParallelDegreeErrors(t *testing.T) {
	ck := openTiny(t)
	for _, tt := range []struct {
		size int
		want string
	}{
		{3, "tensor-parallel degree 3 does not divide num_attention_heads = 4"},
		{8, "tensor-parallel degree 8 does not divide num_attention_heads = 4"},
	} {
		_, err := ck.Load(cpu.New(cpu.Options{}), model.Shard{Rank: 0, Size: tt.size})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("TP=%d: %v, want %q", tt.size, err, tt.want)
		}
	}
}
