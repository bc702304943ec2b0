//go:build cuda

package cuda

import (
	"fmt"

	"cohort/kernels"
)

var _ kernels.SnapshotPool = (*StatePool)(nil)

// snapshotBytes is the size of one snapshot place: every layer's conv and
// recurrent state of one slot, as stored (a bf16 recurrent state takes 2
// bytes an element; capacity planning counts 4, which over-reserves).
func (p *StatePool) snapshotBytes() int64 {
	return int64(p.layers) * (p.convSize()*4 + p.recSize()*p.recElem())
}

// AllocSnapshots replaces the pool's snapshot places with n new ones in one
// device allocation and returns the bytes of one (kernels.SnapshotPool).
func (p *StatePool) AllocSnapshots(n int) int64 {
	if p.snaps != 0 {
		p.b.freePermanent(p.snaps)
		p.snaps, p.places = 0, 0
	}
	p.snaps, p.places = p.b.allocPermanent("AllocSnapshots", p.snapshotBytes()*int64(n)), n
	return p.snapshotBytes()
}

// Save copies slot's state into place on the backend's stream, layer by
// layer (conv, then recurrent).
func (p *StatePool) Save(slot, place int) { p.copyPlace("Save", slot, place, true) }

// Restore copies place into slot's state on the backend's stream.
func (p *StatePool) Restore(place, slot int) { p.copyPlace("Restore", slot, place, false) }

func (p *StatePool) copyPlace(op string, slot, place int, save bool) {
	if place < 0 || place >= p.places {
		panic(fmt.Sprintf("cuda: StatePool.%s: snapshot place %d of %d", op, place, p.places))
	}
	snap := p.snaps + devptr(int64(place)*p.snapshotBytes())
	for l := range p.layers {
		p.check(l, slot)
		i := int64(l*p.slots + slot)
		for _, part := range [2]struct {
			state devptr
			bytes int64
		}{{p.convAt(i), p.convSize() * 4}, {p.recAt(i), p.recSize() * p.recElem()}} {
			dst, src := snap, part.state
			if !save {
				dst, src = part.state, snap
			}
			if err := memcpyDtoD(dst, src, part.bytes); err != nil {
				panic(fmt.Sprintf("cuda: StatePool.%s: %v", op, err))
			}
			snap += devptr(part.bytes)
		}
	}
}
