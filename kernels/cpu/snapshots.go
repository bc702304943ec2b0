package cpu

import (
	"fmt"

	"cohort/kernels"
)

var _ kernels.SnapshotPool = (*StatePool)(nil)

// AllocSnapshots replaces the pool's snapshot places with n zeroed ones and
// returns the bytes of one (kernels.SnapshotPool).
func (p *StatePool) AllocSnapshots(n int) int64 {
	per := p.layers * (p.convSize() + p.recSize())
	p.snaps = make([][]float32, n)
	for i := range p.snaps {
		p.snaps[i] = make([]float32, per)
	}
	return int64(per) * 4
}

// Save copies slot's state into place, layer by layer (conv, then
// recurrent).
func (p *StatePool) Save(slot, place int) {
	snap := p.place("Save", place)
	off := 0
	for l := range p.layers {
		p.check(l, slot)
		off += copy(snap[off:], p.convState(l, slot))
		off += copy(snap[off:], p.recState(l, slot))
	}
}

// Restore copies place into slot's state.
func (p *StatePool) Restore(place, slot int) {
	snap := p.place("Restore", place)
	off := 0
	for l := range p.layers {
		p.check(l, slot)
		off += copy(p.convState(l, slot), snap[off:])
		off += copy(p.recState(l, slot), snap[off:])
	}
}

func (p *StatePool) place(op string, i int) []float32 {
	if i < 0 || i >= len(p.snaps) {
		panic(fmt.Sprintf("cpu: StatePool.%s: snapshot place %d of %d", op, i, len(p.snaps)))
	}
	return p.snaps[i]
}
