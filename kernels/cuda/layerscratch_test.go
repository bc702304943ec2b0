//go:build cuda

package cuda

import (
	"slices"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/model"
)

// TestLayerScratchMatches: with the layers' scratch reused
// (the default; COHORT_CUDA_LAYER_SCRATCH=0 turns it off) a 130-token prefill and the 12 greedy
// decode steps after it (eager, captured and replayed as CUDA graphs) give
// the bits they give without it, and the prefill takes less scratch.
func TestLayerScratchMatches(t *testing.T) {
	be := bf16Backend(t)
	defer func(v bool) { layerScratchOn = v }(layerScratchOn)
	fx := fixtures(t)[0]
	ck := archtest.OpenDir(t, fx.Dir)
	m := loadOn(t, ck, be)
	ids := fx.Prompts[130]
	run := func(on bool) (logits [][]float32, prefillScratch int64) {
		layerScratchOn = on
		be.ResetScratch()
		s := model.NewSession(be, m, len(ids)+16)
		first, err := s.Step(ids, true)
		if err != nil {
			t.Fatal(err)
		}
		prefillScratch, _ = be.ScratchBytes()
		be.ResetScratch()
		logits = append(logits, first)
		next := int32(argmax(first[len(first)-ck.Config.VocabSize:]))
		for range 12 {
			l := step(t, be, s, []int32{next}, false)
			logits = append(logits, l)
			next = int32(argmax(l))
		}
		return logits, prefillScratch
	}
	plain, plainBytes := run(false)
	reused, reusedBytes := run(true)
	for i := range plain {
		if !slices.Equal(plain[i], reused[i]) {
			t.Errorf("step %d: logits with the layers' scratch reused differ (relative %.3g)", i, relDiff(reused[i], plain[i]))
		}
	}
	t.Logf("prefill scratch: %d B reused, %d B not", reusedBytes, plainBytes)
	if reusedBytes >= plainBytes {
		t.Errorf("the prefill took %d B of scratch with the layers' reused, %d B without: want less", reusedBytes, plainBytes)
	}
}
