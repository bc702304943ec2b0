//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"testing"

	"cohort/kernels"
	"cohort/kernels/cpu"
)

// TestGDNMatchesCPU feeds several sequences in pieces (mixed lengths,
// including empty pieces and decodes, non-trivial slots) through the conv
// and the gated delta rule of both backends, starting from a nonzero state
// made by a first step, and compares outputs and the full state after every
// step. The CPU oracle uses the chunked form for prefills; the GPU uses its
// chunked form for pieces of more than gdnChunkMin tokens (70, 130, 64 and
// 65 here) and the recurrent form for the rest.
func TestGDNMatchesCPU(t *testing.T) {
	// Decode batches of more than a wave take the wide recurrent kernel
	// after separate norms and gates, or (wide-fused) the fused wide one.
	defer func(v bool) { gdnWideFused = v }(gdnWideFused)
	for _, fused := range []bool{false, true} {
		gdnWideFused = fused
		t.Run(fmt.Sprintf("wide-fused=%v", fused), func(t *testing.T) { testGDNMatchesCPU(t) })
	}
}

func testGDNMatchesCPU(t *testing.T) {
	p := newPair(t)
	for _, cfg := range []kernels.GDNConfig{
		{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 48, ConvKernel: 4},
		{KeyHeads: 1, ValueHeads: 2, KeyDim: 128, ValueDim: 128, ConvKernel: 4},
		{KeyHeads: 3, ValueHeads: 3, KeyDim: 16, ValueDim: 8, ConvKernel: 2},
		{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, ConvKernel: 4}, // the 4b shape (decode steps run the fused kernel)
	} {
		t.Run(fmt.Sprintf("nk%d/nv%d/dk%d/dv%d/K%d", cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim, cfg.ConvKernel), func(t *testing.T) {
			gpu(t) // each subtest runs on its own goroutine: lock and bind it
			const layers, slotCount, layer = 2, 5, 1
			pc := p.c.NewStatePool(layers, slotCount, cfg)
			pg := p.g.NewStatePool(layers, slotCount, cfg)
			C, K, nv := cfg.ConvDim(), cfg.ConvKernel, cfg.ValueHeads
			r := newRand(uint64(cfg.KeyDim*7 + cfg.ValueDim))
			wc, wg := p.up(randSlice(r, C*K, 0.5), C, 1, K)
			alc, alg := p.up(randSlice(r, nv, 1), nv)
			dtc, dtg := p.up(randSlice(r, nv, 1), nv)
			slots := []int{3, 0, 4}
			steps := [][]int{
				{5, 1, 3},   // warm-up: makes the state nonzero
				{1, 70, 1},  // decode, long prefill, decode
				{0, 1, 130}, // empty piece, decode, longer prefill
				{1, 1, 1},   // decodes
				{64, 2, 65}, // chunk-boundary lengths
			}
			for si, lens := range steps {
				b := batchOf(lens, make([]int, len(lens)), slots, nil)
				T := b.Rows()
				xc, xg := p.up(randSlice(r, T*C, 1), T, C)
				bc, bg := p.up(randSlice(r, T*nv, 3), T, nv)
				ac, ag := p.up(randSlice(r, T*nv, 3), T, nv)
				mc := p.c.CausalConv1d(xc, wc, pc, layer, b)
				mg := p.g.CausalConv1d(xg, wg, pg, layer, b)
				checkClose(t, fmt.Sprintf("step %d conv", si), p.g.Download(mg), p.c.Download(mc), 1e-5)
				// Feed both rules the CPU's conv output so each comparison
				// isolates one op.
				mg2 := p.g.Upload(p.c.Download(mc), T, C)
				oc := p.c.GatedDeltaRule(mc, bc, ac, alc, dtc, pc, layer, b, cfg)
				og := p.g.GatedDeltaRule(mg2, bg, ag, alg, dtg, pg, layer, b, cfg)
				checkClose(t, fmt.Sprintf("step %d delta rule", si), p.g.Download(og), p.c.Download(oc), 1e-3)
				for _, s := range slots {
					checkClose(t, fmt.Sprintf("step %d slot %d state", si, s),
						pg.(*StatePool).Snapshot(s), pc.(*cpu.StatePool).Snapshot(s), 1e-3)
				}
			}
			// Reset zeroes one slot in every layer and leaves the others.
			before := pg.(*StatePool).Snapshot(0)
			pg.Reset(3)
			if slices.ContainsFunc(pg.(*StatePool).Snapshot(3), func(v float32) bool { return v != 0 }) {
				t.Errorf("slot 3 not zero after Reset")
			}
			if !slices.Equal(pg.(*StatePool).Snapshot(0), before) {
				t.Errorf("slot 0 changed by Reset(3)")
			}
		})
	}
}

// TestSetSlotRoundTrip checks that SetSlot writes back what Snapshot read.
func TestSetSlotRoundTrip(t *testing.T) {
	be := gpu(t)
	cfg := kernels.GDNConfig{KeyHeads: 1, ValueHeads: 2, KeyDim: 4, ValueDim: 3, ConvKernel: 4}
	pool := be.NewStatePool(2, 3, cfg).(*StatePool)
	want := randSlice(newRand(9), len(pool.Snapshot(1)), 1)
	pool.SetSlot(1, want)
	if !slices.Equal(pool.Snapshot(1), want) {
		t.Fatalf("Snapshot after SetSlot differs")
	}
	if slices.ContainsFunc(pool.Snapshot(2), func(v float32) bool { return v != 0 }) {
		t.Fatalf("SetSlot(1) touched slot 2")
	}
}
