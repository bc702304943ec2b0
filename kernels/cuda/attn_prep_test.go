//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"cohort/kernels"
)

// TestPrepareQK: the fused query/gate/key kernel matches the five ops it
// replaces on the GPU (to a float32 ulp or so: the compiler contracts the
// RoPE products into FMAs differently in the two kernels; measured 8e-8
// relative on the H200) and the CPU oracle. Every shape runs on the
// block-per-head kernel and (normRowsMin 1) on the warp-per-head one where
// its dims allow.
func TestPrepareQK(t *testing.T) {
	defer func(v int) { normRowsMin = v }(normRowsMin)
	for _, min := range []int{normRowsDefault, 1} {
		normRowsMin = min
		t.Run(fmt.Sprintf("min%d", min), testPrepareQK)
	}
}

func testPrepareQK(t *testing.T) {
	p := newPair(t)
	for _, cfg := range []kernels.AttnConfig{
		{Heads: 16, KVHeads: 4, HeadDim: 256, RotaryDim: 64, Theta: 1e7}, // the 4b shape
		{Heads: 4, KVHeads: 2, HeadDim: 64, RotaryDim: 32, Theta: 1e4},
		{Heads: 2, KVHeads: 2, HeadDim: 40, RotaryDim: 0, Theta: 1e4},
		{Heads: 4, KVHeads: 1, HeadDim: 128, RotaryDim: 128, Theta: 1e6}, // every dim of chunk 0 rotated
	} {
		t.Run(fmt.Sprintf("H%d_KV%d_hd%d_rd%d", cfg.Heads, cfg.KVHeads, cfg.HeadDim, cfg.RotaryDim), func(t *testing.T) {
			gpu(t)
			const T, eps = 5, 1e-6
			r := newRand(uint64(cfg.HeadDim))
			positions := []int32{0, 1, 7, 300, 4095}
			qgc, qgg := p.up(randSlice(r, T*cfg.Heads*2*cfg.HeadDim, 2), T, cfg.Heads*2*cfg.HeadDim)
			kc, kg := p.up(randSlice(r, T*cfg.KVHeads*cfg.HeadDim, 2), T, cfg.KVHeads*cfg.HeadDim)
			qwc, qwg := p.up(randSlice(r, cfg.HeadDim, 0.5), cfg.HeadDim)
			kwc, kwg := p.up(randSlice(r, cfg.HeadDim, 0.5), cfg.HeadDim)
			fuse := p.g.fuse
			defer func() { p.g.fuse = fuse }()
			p.g.fuse = true
			q, gate, k := p.g.PrepareQK(qgg, kg, qwg, kwg, positions, cfg, eps)
			p.g.fuse = false
			q0, gate0, k0 := p.g.PrepareQK(qgg, kg, qwg, kwg, positions, cfg, eps)
			qc, gatec, kcOut := kernels.PrepareQKOps(p.c, qgc, kc, qwc, kwc, positions, cfg, eps)
			for _, x := range []struct {
				name       string
				fused, ops kernels.Tensor
				cpu        kernels.Tensor
			}{{"q", q, q0, qc}, {"gate", gate, gate0, gatec}, {"k", k, k0, kcOut}} {
				got := p.g.Download(x.fused)
				checkClose(t, x.name+" vs the five ops", got, p.g.Download(x.ops), 1e-6)
				checkClose(t, x.name+" vs CPU", got, p.c.Download(x.cpu), 1e-5)
			}
		})
	}
}
