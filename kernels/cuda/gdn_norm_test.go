//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"cohort/kernels"
	"cohort/kernels/cpu"
)

// TestGatedDeltaRuleNormMatchesCPU: batch-1 decode steps of the GDN mixer's
// end, the delta rule and its gated RMSNorm, take the one fused launch
// (gdn_decode_norm_cols_f32) and match the CPU backend's two ops, output
// and state, over steps that carry the state, with the f32 and the bf16
// state; with the fusion off (the two launches) they match as well.
func TestGatedDeltaRuleNormMatchesCPU(t *testing.T) {
	defer func(v bool) { gdnNormFused = v }(gdnNormFused)
	forGDNStates(t, func(t *testing.T, bf16 bool) {
		for _, fused := range []bool{true, false} {
			gdnNormFused = fused
			for _, cfg := range []kernels.GDNConfig{
				{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, ConvKernel: 4}, // the 4b shape
				{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 48, ConvKernel: 4},     // a partial column block
				{KeyHeads: 3, ValueHeads: 3, KeyDim: 16, ValueDim: 8, ConvKernel: 2},
			} {
				name := fmt.Sprintf("fused=%v/nk%d/nv%d/dk%d/dv%d", fused, cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim)
				t.Run(name, func(t *testing.T) { testGatedDeltaRuleNorm(t, cfg, bf16, fused) })
			}
		}
	})
}

func testGatedDeltaRuleNorm(t *testing.T, cfg kernels.GDNConfig, bf16, fused bool) {
	p := newPair(t)
	g := gpu(t)
	const layers, slotCount, layer, slot = 2, 3, 1, 2
	pc := p.c.NewStatePool(layers, slotCount, cfg)
	pg := p.g.NewStatePool(layers, slotCount, cfg)
	C, nv, dv := cfg.ConvDim(), cfg.ValueHeads, cfg.ValueDim
	r := newRand(uint64(cfg.KeyDim*13 + dv))
	alc, alg := p.up(randSlice(r, nv, 1), nv)
	dtc, dtg := p.up(randSlice(r, nv, 1), nv)
	wc, wg := p.up(randSlice(r, dv, 1), dv)
	for step, n := range []int{6, 1, 1, 1} { // a prefill makes the state nonzero
		b := batchOf([]int{n}, []int{0}, []int{slot}, nil)
		mc, mg := p.up(randSlice(r, n*C, 1), n, C)
		bc, bg := p.up(randSlice(r, n*nv, 3), n, nv)
		ac, ag := p.up(randSlice(r, n*nv, 3), n, nv)
		zc, zg := p.up(randSlice(r, n*nv*dv, 2), n, nv*dv)
		want := p.c.GatedRMSNorm(p.c.GatedDeltaRule(mc, bc, ac, alc, dtc, pc, layer, b, cfg), zc, wc, 1e-6)
		norm := kernels.GatedNorm{Z: zg, W: wg, Eps: 1e-6}
		got := kernels.GatedDeltaRuleNorm(p.g, norm, mg, bg, ag, alg, dtg, pg, layer, b, cfg)
		what := fmt.Sprintf("step %d (%d tokens)", step, n)
		if wantFused := fused && n == 1; (g.lastLaunch == gdnStateKernel("gdn_decode_norm_cols_f32", bf16)) != wantFused {
			t.Errorf("%s: last launch %s, want the fused kernel: %v", what, g.lastLaunch, wantFused)
		}
		checkClose(t, what+" output", p.g.Download(got), p.c.Download(want), gdnTol(1e-3, bf16))
		checkClose(t, what+" state", pg.(*StatePool).Snapshot(slot), pc.(*cpu.StatePool).Snapshot(slot), gdnTol(1e-3, bf16))
		gdnRoundRef(pc.(*cpu.StatePool), []int{slot}, cfg, bf16)
	}
}
