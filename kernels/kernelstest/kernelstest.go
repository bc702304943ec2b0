// Package kernelstest holds helpers shared by the backends' differential
// tests (kernels/cpu against float64 references, kernels/cuda against the
// CPU oracle).
package kernelstest

import (
	"math"
	"math/rand/v2"
	"testing"

	"cohort/kernels"
)

// RandSlice returns n values uniform in [-scale, scale).
func RandSlice(r *rand.Rand, n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = (2*r.Float32() - 1) * scale
	}
	return s
}

// RelDiff returns max|got−want| / max|want| (the magnitude, at least 1e-3);
// NaN anywhere, or different lengths, give +Inf.
func RelDiff(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.IsNaN(w) {
			return math.Inf(1)
		}
		d = max(d, math.Abs(g-w))
		m = max(m, math.Abs(w))
	}
	return d / max(1e-3, m)
}

// BatchOf builds a batch of sequences with the given lengths, cached counts
// and slots laid out in order, with their positions; pages (nil: none) are
// the caller's.
func BatchOf(lens, cached, slots []int, pages [][]int32) *kernels.Batch {
	b := &kernels.Batch{}
	start := 0
	for i, n := range lens {
		s := kernels.Seq{Slot: slots[i], Start: start, Len: n, Cached: cached[i]}
		if pages != nil {
			s.Pages = pages[i]
		}
		b.Seqs = append(b.Seqs, s)
		for j := range n {
			b.Positions = append(b.Positions, int32(cached[i]+j))
		}
		start += n
	}
	return b
}

// SlotIO reads and writes a slot's whole state (the backends' StatePool
// Snapshot and SetSlot, which tests use).
type SlotIO interface {
	Snapshot(slot int) []float32
	SetSlot(slot int, state []float32)
}

// CheckSnapshots is the SnapshotPool contract, for each backend's tests: a
// restored place gives back the state saved there, whatever the slot did in
// between; places are independent; and a save or restore touches only its
// slot. The pool needs at least 3 slots.
func CheckSnapshots(t *testing.T, p kernels.SnapshotPool, io SlotIO) {
	t.Helper()
	if bytes := p.AllocSnapshots(2); bytes != int64(len(io.Snapshot(0)))*4 {
		t.Fatalf("AllocSnapshots: %d bytes a place, a slot's state is %d", bytes, len(io.Snapshot(0))*4)
	}
	r := rand.New(rand.NewPCG(7, 8))
	a, b, other := RandSlice(r, len(io.Snapshot(0)), 1), RandSlice(r, len(io.Snapshot(0)), 1), RandSlice(r, len(io.Snapshot(0)), 1)
	// The wanted states are what the slots read back once set: a pool that
	// stores its state rounded (the CUDA bf16 state) must then restore
	// exactly that (within a bf16 rounding of what was set).
	set := func(slot int, state []float32) []float32 {
		io.SetSlot(slot, state)
		got := io.Snapshot(slot)
		if d := RelDiff(got, state); d > 1.0/128 {
			t.Fatalf("slot %d reads back %.3g from what was set", slot, d)
		}
		return got
	}
	a, other = set(0, a), set(2, other)
	p.Save(0, 0)
	b = set(0, b)
	p.Save(0, 1)
	p.Reset(0)
	p.Restore(0, 1) // place 0 (a) into slot 1
	p.Restore(1, 0) // place 1 (b) into slot 0
	for _, c := range []struct {
		slot int
		want []float32
		what string
	}{{1, a, "slot 1 restored from place 0"}, {0, b, "slot 0 restored from place 1"}, {2, other, "slot 2, untouched"}} {
		if got := io.Snapshot(c.slot); RelDiff(got, c.want) != 0 {
			t.Errorf("%s: differs (relative %.3g)", c.what, RelDiff(got, c.want))
		}
	}
}
