//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/kernels/kernelstest"
)

// The bf16 recurrent state (COHORT_CUDA_GDN_STATE=bf16) in the GDN tests.
//
// Tolerances: a kernel rounds the state to bf16 once when it stores it (at
// the end of its launch: once a step for every sequence, so once a token
// for decode rows; gdn_recurrent_f32_sbf16 once a token), to nearest even.
// bf16 keeps 8 significant bits, so a rounding moves an element by at most
// half a unit in its last place, 2^-8 of its magnitude, so by at most 2^-8
// of the state's largest (the tests' relative measure, relDiff, is the
// largest difference over the largest reference value). Where a test
// rounds its f32 reference the same way at the same points (gdnRoundRef:
// after every step), the two sides start every step from states that
// differ by their f32 difference plus at most one unit in the last place
// (the two roundings of nearby values may land on neighbouring bf16
// values: 2^-7), and the step's own rounding stays within that unit, so the
// f32 test's tolerance plus gdnBF16Step (2^-7) covers it without
// accumulating. Where the reference stays f32 (TestGDNStateBF16Drift,
// TestGDNChunkedPrefillThenDecode), n roundings can move the state by up to
// n·2^-8 of its largest value if every one adds up (the rule's update
// S ← e^g (I − β k kᵀ) S + β k vᵀ with |k| = 1, β ≤ 1, g ≤ 0 does not
// enlarge a column's error), and the outputs read that state: the bound
// used is n·2^-7 (twice that), and the tests log the measured deviation.
const gdnBF16Step = 1.0 / 128

// gdnStateName is the subtest name of a state kind.
func gdnStateName(bf16 bool) string {
	if bf16 {
		return "state=bf16"
	}
	return "state=f32"
}

// forGDNStates runs f as subtests with the pools it makes storing the
// recurrent state as f32 and as bf16.
func forGDNStates(t *testing.T, f func(t *testing.T, bf16 bool)) {
	t.Helper()
	defer func(v bool) { gdnStateBF16 = v }(gdnStateBF16)
	for _, bf16 := range []bool{false, true} {
		gdnStateBF16 = bf16
		t.Run(gdnStateName(bf16), func(t *testing.T) { f(t, bf16) })
	}
}

// gdnTol is a comparison's tolerance: tol for the f32 state, tol plus
// gdnBF16Step for the bf16 state against a reference rounded the same way.
func gdnTol(tol float64, bf16 bool) float64 {
	if bf16 {
		return tol + gdnBF16Step
	}
	return tol
}

// roundRecBF16 rounds the recurrent parts of a Snapshot-formatted state
// (per layer: conv state, then recurrent state) to bf16, in place.
func roundRecBF16(state []float32, cfg kernels.GDNConfig) []float32 {
	conv := (cfg.ConvKernel - 1) * cfg.ConvDim()
	rec := cfg.ValueHeads * cfg.KeyDim * cfg.ValueDim
	for off := 0; off+conv+rec <= len(state); off += conv + rec {
		part := state[off+conv : off+conv+rec]
		for i, v := range part {
			part[i] = widenBF16([]uint16{bf16Bits(v)})[0]
		}
	}
	return state
}

// gdnRoundRef rounds the recurrent state of the reference pool's slots as
// the bf16 state's kernels round theirs at the end of a step (nothing for
// the f32 state).
func gdnRoundRef(ref kernelstest.SlotIO, slots []int, cfg kernels.GDNConfig, bf16 bool) {
	if !bf16 {
		return
	}
	for _, s := range slots {
		ref.SetSlot(s, roundRecBF16(ref.Snapshot(s), cfg))
	}
}

// TestGDNStateBF16Drift measures the bf16 state against the f32 CPU oracle
// without re-rounding the reference: a 100-token chunked prefill and then
// 160 decode steps of two sequences (one rounding a token), with a GPU pool
// of f32 state beside it for scale. It logs the largest output and state
// deviation after 1, 10, 40 and 160 decode steps and fails only past the
// accumulation bound n·2^-8 (n roundings so far, see above).
func TestGDNStateBF16Drift(t *testing.T) {
	p := newPair(t)
	cfg := kernels.GDNConfig{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128, ConvKernel: 4}
	const layers, slotCount, layer, decodes = 1, 3, 0, 160
	defer func(v bool) { gdnStateBF16 = v }(gdnStateBF16)
	gdnStateBF16 = false
	pf := p.g.NewStatePool(layers, slotCount, cfg).(*StatePool)
	gdnStateBF16 = true
	pb := p.g.NewStatePool(layers, slotCount, cfg).(*StatePool)
	pc := p.c.NewStatePool(layers, slotCount, cfg).(*cpu.StatePool)
	if pf.bf16 || !pb.bf16 {
		t.Fatalf("pool kinds: f32 pool bf16=%v, bf16 pool bf16=%v", pf.bf16, pb.bf16)
	}
	nv := cfg.ValueHeads
	r := newRand(1601)
	alc, alg := p.up(randSlice(r, nv, 1), nv)
	dtc, dtg := p.up(randSlice(r, nv, 1), nv)
	slots := []int{2, 0}
	step := func(lens []int) (oc, of, ob []float32) {
		b := batchOf(lens, make([]int, len(lens)), slots, nil)
		in := randGDNInputs(r, b.Rows(), cfg)
		return gdnRun(p.c, in, alc, dtc, pc, layer, b, cfg), gdnRun(p.g, in, alg, dtg, pf, layer, b, cfg), gdnRun(p.g, in, alg, dtg, pb, layer, b, cfg)
	}
	report := func(what string, n int, oc, of, ob []float32) {
		var sc, sf, sb []float32
		for _, s := range slots {
			sc, sf, sb = append(sc, pc.Snapshot(s)...), append(sf, pf.Snapshot(s)...), append(sb, pb.Snapshot(s)...)
		}
		tol := 1e-3 + float64(n)*gdnBF16Step
		t.Logf("%s (%d roundings): output deviation f32 %.3g bf16 %.3g; state f32 %.3g bf16 %.3g (bound %.3g)",
			what, n, relDiff(of, oc), relDiff(ob, oc), relDiff(sf, sc), relDiff(sb, sc), tol)
		checkClose(t, what+" bf16 output", ob, oc, tol)
		checkClose(t, what+" bf16 state", sb, sc, tol)
		checkClose(t, what+" f32 state", sf, sc, 1e-3)
	}
	oc, of, ob := step([]int{100, 100})
	report("prefill", 1, oc, of, ob) // the outputs read the zero start state; the state is rounded once
	for n := 1; n <= decodes; n++ {
		oc, of, ob = step([]int{1, 1})
		if n == 1 || n == 10 || n == 40 || n == decodes {
			report(fmt.Sprintf("decode %d", n), n, oc, of, ob)
		}
	}
}

// bf16SnapshotIO is the slot I/O of a bf16-state pool for the SnapshotPool
// contract: SetSlot stores the values already rounded as the pool rounds
// them, so that restored state must come back bit for bit.
type bf16SnapshotIO struct {
	p *StatePool
}

func (io bf16SnapshotIO) Snapshot(slot int) []float32 { return io.p.Snapshot(slot) }
func (io bf16SnapshotIO) SetSlot(slot int, state []float32) {
	io.p.SetSlot(slot, roundRecBF16(append([]float32(nil), state...), io.p.cfg))
}

// bf16SnapshotPool checks that a place of a bf16-state pool holds the
// stored bytes (conv 4 a value, recurrent 2) and reports to the contract
// the bytes of the float32 format its slot I/O reads (which it checks).
type bf16SnapshotPool struct {
	*StatePool
	t *testing.T
}

func (p bf16SnapshotPool) AllocSnapshots(n int) int64 {
	got := p.StatePool.AllocSnapshots(n)
	want := int64(p.layers) * (p.convSize()*4 + p.recSize()*2)
	if got != want {
		p.t.Fatalf("AllocSnapshots (bf16 state): %d bytes a place, want %d", got, want)
	}
	return int64(p.layers) * (p.convSize() + p.recSize()) * 4
}
