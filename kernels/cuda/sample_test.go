//go:build cuda

package cuda

import (
	"math"
	"slices"
	"testing"

	"cohort/model/sample"
)

// TestArgmax: the device argmax picks sample.Argmax's token in every row:
// ties (lowest index), -Inf rows, NaN logits (never chosen over a number;
// a NaN first logit gives 0, as the host loop does), and the 248k
// vocabulary of the 4b shape.
func TestArgmax(t *testing.T) {
	g := bf16Backend(t)
	r := newRand(11)
	for _, vocab := range []int{1, 7, 1000, 248320} {
		rows := [][]float32{}
		for range 5 {
			rows = append(rows, randSlice(r, vocab, 3))
		}
		tie := randSlice(r, vocab, 1)
		if vocab > 2 {
			tie[vocab-1], tie[1] = 50, 50 // the lower index wins
		}
		inf := make([]float32, vocab)
		for i := range inf {
			inf[i] = float32(math.Inf(-1))
		}
		nan := randSlice(r, vocab, 1)
		nan[vocab/2] = float32(math.NaN())
		nanFirst := randSlice(r, vocab, 1)
		nanFirst[0] = float32(math.NaN())
		rows = append(rows, tie, inf, nan, nanFirst)
		var flat []float32
		var want []int32
		for _, row := range rows {
			flat = append(flat, row...)
			want = append(want, int32(sample.Argmax(row)))
		}
		got := g.Argmax(g.Upload(flat, len(rows), vocab))
		if !slices.Equal(got, want) {
			t.Errorf("vocab %d: device argmax %v, host %v", vocab, got, want)
		}
		g.ResetScratch()
	}
}
