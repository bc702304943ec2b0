package qwen35_test

import (
	"strings"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/qwen35"
)

// TestTensorParallelMatchesSingle: TP=2 and TP=4 (where the heads allow it)
// match TP=1 on the HF fixtures' checkpoints.
func TestTensorParallelMatchesSingle(t *testing.T) {
	for _, fx := range fixtures(t) {
		t.Run(fx.Name, func(t *testing.T) {
			ck := archtest.OpenDir(t, fx.Dir)
			fits := func(size int) error { return qwen35.CheckShard(ck.Config, model.Shard{Size: size}) }
			archtest.TPMatchesSingle(t, ck, fx.Prompts[130], fits)
		})
	}
}

func TestTensorParallelDegreeErrors(t *testing.T) {
	for _, fx := range fixtures(t) {
		ck := archtest.OpenDir(t, fx.Dir)
		_, err := ck.Load(cpu.New(cpu.Options{}), model.Shard{Rank: 0, Size: 3})
		if err == nil || !strings.Contains(err.Error(), "tensor-parallel degree 3 does not divide num_attention_heads = 4") {
			t.Errorf("%s: TP=3: %v", fx.Name, err)
		}
	}
}
