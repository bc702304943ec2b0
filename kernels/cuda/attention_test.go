//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"cohort/kernels"
)

// TestAttentionMatchesCPU runs several steps of mixed batches (prefills,
// chunks, decodes, reordered sequences) with non-contiguous interleaved
// pages through both backends and compares every output.
func TestAttentionMatchesCPU(t *testing.T) {
	p := newPair(t)
	// This checks the float32 kernel (decode rows, short chunks) at its own
	// tolerance; the tensor-core prefill kernel has its tests
	// (attention_prefill_test.go).
	on := flashAttention
	flashAttention = false
	defer func() { flashAttention = on }()
	for _, cfg := range []kernels.AttnConfig{
		{Heads: 4, KVHeads: 2, HeadDim: 8, RotaryDim: 4, Theta: 1e4},
		{Heads: 8, KVHeads: 2, HeadDim: 256, RotaryDim: 64, Theta: 1e7},
		{Heads: 6, KVHeads: 6, HeadDim: 72, RotaryDim: 16, Theta: 1e7},
	} {
		t.Run(fmt.Sprintf("H%d/KV%d/hd%d", cfg.Heads, cfg.KVHeads, cfg.HeadDim), func(t *testing.T) {
			gpu(t) // each subtest runs on its own goroutine: lock and bind it
			const pageSize, numPages, layers, layer = 16, 64, 2, 1
			cc := p.c.NewKVCache(layers, numPages, pageSize, cfg.KVHeads, cfg.HeadDim)
			cg := p.g.NewKVCache(layers, numPages, pageSize, cfg.KVHeads, cfg.HeadDim)
			// Three sequences with interleaved, non-contiguous pages.
			pages := [][]int32{
				{7, 2, 9, 0, 13, 21, 40, 41, 3, 60},
				{1, 15, 30, 22, 4, 5, 50, 51, 52, 53},
				{20, 6, 11, 8, 10, 12, 33, 34, 35, 63},
			}
			cached := []int{0, 0, 0}
			r := newRand(uint64(cfg.HeadDim))
			steps := []struct{ seqs, lens []int }{
				{[]int{0, 1, 2}, []int{6, 1, 40}},  // prefills
				{[]int{0, 1, 2}, []int{1, 17, 1}},  // decode, chunk, decode
				{[]int{2, 0}, []int{70, 1}},        // reordered sequences
				{[]int{1}, []int{1}},               // one decode
				{[]int{0, 1, 2}, []int{100, 1, 1}}, // long chunk across pages
				{[]int{2, 1, 0}, []int{1, 1, 1}},   // decodes
			}
			qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
			for si, st := range steps {
				var lens, cach, slots []int
				var pg [][]int32
				for i, s := range st.seqs {
					lens = append(lens, st.lens[i])
					cach = append(cach, cached[s])
					slots = append(slots, s)
					pg = append(pg, pages[s])
				}
				b := batchOf(lens, cach, slots, pg)
				T := b.Rows()
				qc, qg := p.up(randSlice(r, T*qw, 1), T, qw)
				kc, kg := p.up(randSlice(r, T*kw, 1), T, kw)
				vc, vg := p.up(randSlice(r, T*kw, 1), T, kw)
				gc, gg := p.up(randSlice(r, T*qw, 2), T, qw)
				want := p.c.Download(p.c.Attention(qc, kc, vc, gc, cc, layer, b, cfg))
				got := p.g.Download(p.g.Attention(qg, kg, vg, gg, cg, layer, b, cfg))
				checkClose(t, fmt.Sprintf("step %d", si), got, want, 1e-3)
				for i, s := range st.seqs {
					cached[s] += st.lens[i]
				}
			}
			// Layer 0 of the cache was never written.
			kc := cg.(*KVCache)
			n := int64(numPages * pageSize * cfg.KVHeads * cfg.HeadDim)
			for _, base := range []devptr{kc.k, kc.v} {
				tmp := &Tensor{shape: []int{int(n)}, n: int(n), ptr: base}
				for _, v := range p.g.Download(tmp) {
					if v != 0 {
						t.Fatalf("layer 0 of the cache was written")
					}
				}
			}
		})
	}
}
