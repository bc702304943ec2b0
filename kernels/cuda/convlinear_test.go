//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"testing"

	"cohort/kernels"
)

// TestConvLinears: the GEMV that runs the causal conv in its epilogue gives
// the bits of Linears followed by CausalConv1d, outputs and conv state
// alike, over decode steps that carry the state (slots out of order), at 1,
// 3 and 8 rows, and falls back to the two ops for a prefill, in each of
// fusedGEMVVariants.
func TestConvLinears(t *testing.T) {
	g := bf16Backend(t)
	cfg := kernels.GDNConfig{KeyHeads: 2, ValueHeads: 4, KeyDim: 64, ValueDim: 64, ConvKernel: 4}
	const layers, slotCount, layer, K = 2, 9, 1, 512
	C := cfg.ConvDim()
	r := newRand(11)
	conv := g.Upload(randSlice(r, C*cfg.ConvKernel, 0.5), C, 1, cfg.ConvKernel)
	var ws []kernels.Tensor
	for _, n := range []int{C, 256, 4, 4} {
		ws = append(ws, g.UploadWeight(roundBF16(randSlice(r, n*K, 0.1)), n, K))
	}
	for i, v := range fusedGEMVVariants {
		for _, lens := range [][]int{{1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1}, {3, 1}} {
			t.Run(fmt.Sprint(i, lens), func(t *testing.T) {
				g := bf16Backend(t)
				defer g.tune(v)()
				fused := g.NewStatePool(layers, slotCount, cfg).(*StatePool)
				plain := g.NewStatePool(layers, slotCount, cfg).(*StatePool)
				slots := []int{7, 2, 5, 0, 8, 1, 3, 6}[:len(lens)]
				for _, s := range slots {
					init := randSlice(r, len(fused.Snapshot(s)), 1)
					fused.SetSlot(s, init)
					plain.SetSlot(s, init)
				}
				for step := range 3 {
					b := batchOf(lens, make([]int, len(lens)), slots, nil)
					x := g.Upload(randSlice(r, b.Rows()*K, 1), b.Rows(), K)
					got := g.ConvLinears(x, conv, fused, layer, b, ws...)
					want := g.Linears(x, ws...)
					want[0] = g.CausalConv1d(want[0], conv, plain, layer, b)
					for i := range ws {
						if a, e := g.Download(got[i]), g.Download(want[i]); !slices.Equal(a, e) {
							t.Fatalf("step %d output %d differs (relative %.3g)", step, i, relDiff(a, e))
						}
					}
					for _, s := range slots {
						if !slices.Equal(fused.Snapshot(s), plain.Snapshot(s)) {
							t.Fatalf("step %d: slot %d state differs", step, s)
						}
					}
					g.ResetScratch()
				}
			})
		}
	}
}
