//go:build cuda

package cuda

import (
	"slices"
	"strings"
	"testing"

	"cohort/internal/testmodels/archtest"
)

func TestDecodeBucket(t *testing.T) {
	for rows, want := range map[int]int{1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 8: 8, 9: 16, 31: 32, 32: 32, 505: 512, 512: 512, 513: 513} {
		if got := decodeBucket(rows); got != want || got-rows > decodeMaxPads {
			t.Errorf("decodeBucket(%d) = %d, want %d (at most %d pad rows)", rows, got, want, decodeMaxPads)
		}
	}
}

func TestDecodeBucketsUpTo(t *testing.T) {
	for _, tc := range []struct {
		max  int
		want []int
	}{
		{0, nil}, {1, []int{1}}, {3, []int{1, 2, 4}}, {8, []int{1, 2, 4, 8}}, {9, []int{1, 2, 4, 8, 16}},
		{32, []int{1, 2, 4, 8, 16, 24, 32}},
	} {
		if got := decodeBucketsUpTo(tc.max); !slices.Equal(got, tc.want) {
			t.Errorf("decodeBucketsUpTo(%d) = %v, want %v", tc.max, got, tc.want)
		}
	}
	all := decodeBucketsUpTo(10000)
	if len(all) != 3+decodeMaxBucket/8 || all[len(all)-1] != decodeMaxBucket {
		t.Errorf("decodeBucketsUpTo(10000): %d buckets ending at %d, want %d ending at %d", len(all), all[len(all)-1], 3+decodeMaxBucket/8, decodeMaxBucket)
	}
	for _, n := range all {
		if decodeBucket(n) != n {
			t.Errorf("bucket %d is not its own bucket (%d)", n, decodeBucket(n))
		}
	}
}

// TestDecodeBucketsMatchUnpadded: with decode buckets on, the batch-3
// steps of decodeRunFed replay a batch-4 graph (one pad row) and the
// batch-2 steps a batch-2 one, and every step's logits of its own rows
// stay next to the unpadded graphs' (the kernels choose some splits by the
// batch's size, so the bits may differ).
func TestDecodeBucketsMatchUnpadded(t *testing.T) {
	be := bf16Backend(t)
	if !be.graph.enabled {
		t.Skip("CUDA graphs are off")
	}
	defer func(v bool) { decodeBuckets = v }(decodeBuckets)
	fx := fixtures(t)[0]
	ck := archtest.OpenDir(t, fx.Dir)
	m := loadOn(t, ck, be)
	prompts := [][]int32{fx.Prompts[63], fx.Prompts[1], fx.Prompts[130]}
	const steps = 24
	vocab := ck.Config.VocabSize
	decodeBuckets = false
	plain := decodeRunFed(t, be, m, vocab, prompts, steps, false)
	decodeBuckets = true
	before := graphKeys(be)
	padded := decodeRunFed(t, be, m, vocab, prompts, steps, false)
	var fours, threes int
	for k := range be.graph.byKey {
		if before[k] {
			continue
		}
		fours += strings.Count(k, "/decode/4/")
		threes += strings.Count(k, "/decode/3/")
	}
	if fours != 1 || threes != 0 {
		t.Errorf("new graphs: %d of batch 4 and %d of batch 3; want the batch-3 steps on one batch-4 graph", fours, threes)
	}
	for i := range plain {
		n := len(plain[i])
		if len(padded[i]) != n {
			t.Fatalf("step %d: %d logits padded, %d plain", i, len(padded[i]), n)
		}
		if d := relDiff(padded[i], plain[i]); d > 2e-3 {
			t.Errorf("step %d: padded logits differ from plain by %.3g (relative)", i, d)
		}
	}
}

func graphKeys(be *Backend) map[string]bool {
	keys := map[string]bool{}
	for k := range be.graph.byKey {
		keys[k] = true
	}
	return keys
}
