package cpu

import (
	"slices"
	"testing"
)

func TestStatePoolReset(t *testing.T) {
	be := New(Options{})
	pool := be.NewStatePool(3, 4, gva).(*StatePool)
	if pool.Slots() != 4 {
		t.Fatalf("Slots() = %d", pool.Slots())
	}
	isZero := func(s []float32) bool { return !slices.ContainsFunc(s, func(v float32) bool { return v != 0 }) }
	if !isZero(pool.Snapshot(2)) {
		t.Fatalf("new pool is not zeroed")
	}
	// Dirty every slot through the real ops (conv + delta rule), on all layers.
	r := newRand(8)
	const T = 5
	b := batchOf([]int{T, T, T, T}, []int{0, 0, 0, 0}, []int{0, 1, 2, 3}, nil)
	w := be.Upload(randSlice(r, gva.ConvDim()*gva.ConvKernel, 1), gva.ConvDim(), gva.ConvKernel)
	for layer := range 3 {
		c := newGDNCase(be, r, 4*T, gva)
		mixed := be.CausalConv1d(c.mixed, w, pool, layer, b)
		be.GatedDeltaRule(mixed, c.beta, c.a, c.aLog, c.dtBi, pool, layer, b, gva)
	}
	before := make([][]float32, 4)
	for s := range 4 {
		before[s] = pool.Snapshot(s)
		if isZero(before[s]) {
			t.Fatalf("slot %d was not dirtied", s)
		}
	}
	for l := range 3 {
		if isZero(pool.convState(l, 2)) || isZero(pool.recState(l, 2)) {
			t.Fatalf("layer %d of slot 2 was not dirtied", l)
		}
	}
	pool.Reset(2)
	snap := pool.Snapshot(2)
	if want := 3 * ((gva.ConvKernel-1)*gva.ConvDim() + gva.ValueHeads*gva.KeyDim*gva.ValueDim); len(snap) != want {
		t.Fatalf("Snapshot has %d values, want %d", len(snap), want)
	}
	if !isZero(snap) {
		t.Errorf("slot 2 not zero after Reset")
	}
	for _, s := range []int{0, 1, 3} {
		if !slices.Equal(pool.Snapshot(s), before[s]) {
			t.Errorf("slot %d changed by Reset(2)", s)
		}
	}
}
