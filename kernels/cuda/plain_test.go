//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"cohort/kernels"
)

func TestPlainRMSNormMatchesCPU(t *testing.T) {
	p := newPair(t)
	r := newRand(25)
	for _, s := range [][3]int{{1, 64, 64}, {3, 256, 32}, {7, 4096, 128}, {5, 2560, 2560}} {
		T, cols, g := s[0], s[1], s[2]
		t.Run(fmt.Sprintf("%dx%d/%d", T, cols, g), func(t *testing.T) {
			gpu(t)
			xc, xg := p.up(randSlice(r, T*cols, 2), T, cols)
			wc, wg := p.up(randSlice(r, g, 1), g)
			want := p.c.Download(p.c.PlainRMSNorm(xc, wc, 1e-6))
			checkClose(t, "PlainRMSNorm", p.g.Download(p.g.PlainRMSNorm(xg, wg, 1e-6)), want, 1e-5)
		})
	}
}

// TestUngatedAttentionMatchesCPU covers the float32 kernel (decode rows,
// short chunks) and, with flash on, the tensor-core prefill kernel.
func TestUngatedAttentionMatchesCPU(t *testing.T) {
	p := newPair(t)
	on := flashAttention
	defer func() { flashAttention = on }()
	cfg := kernels.AttnConfig{Heads: 8, KVHeads: 2, HeadDim: 128, RotaryDim: 128, Theta: 1e6}
	for _, tt := range []struct {
		flash bool
		tol   float64
	}{{false, 1e-3}, {true, 3e-2}} {
		t.Run(fmt.Sprintf("flash=%v", tt.flash), func(t *testing.T) {
			gpu(t)
			flashAttention = tt.flash
			cc := p.c.NewKVCache(1, 16, 16, cfg.KVHeads, cfg.HeadDim)
			cg := p.g.NewKVCache(1, 16, 16, cfg.KVHeads, cfg.HeadDim)
			pages := [][]int32{{3, 0, 7, 1, 9, 2, 4, 5}, {6, 8, 10, 11, 12, 13, 14, 15}}
			r := newRand(26)
			cached := []int{0, 0}
			qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
			for si, lens := range [][]int{{100, 5}, {1, 1}, {1, 30}} {
				b := batchOf(lens, cached, []int{0, 1}, pages)
				T := b.Rows()
				qc, qg := p.up(randSlice(r, T*qw, 1), T, qw)
				kc, kg := p.up(randSlice(r, T*kw, 1), T, kw)
				vc, vg := p.up(randSlice(r, T*kw, 1), T, kw)
				want := p.c.Download(p.c.UngatedAttention(qc, kc, vc, cc, 0, b, cfg))
				got := p.g.Download(p.g.UngatedAttention(qg, kg, vg, cg, 0, b, cfg))
				checkClose(t, fmt.Sprintf("step %d", si), got, want, tt.tol)
				for i, n := range lens {
					cached[i] += n
				}
			}
		})
	}
}
