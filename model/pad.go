package model

import (
	"fmt"
	"slices"

	"cohort/kernels"
)

// Pad says where a model's state keeps the pad rows of a padded decode step
// (kernels.DecodePadder): their GDN state slot (0 for a model without one)
// and their KV page.
type Pad struct {
	Slot int
	Page int32
}

// PadOf returns the pad place of a state's KV cache and GDN pool (nil when
// the model has none), or nil when either keeps no place for pad rows (no
// PadPager or PadSlotter, or a negative page or slot).
func PadOf(kv kernels.KVCache, gdn kernels.StatePool) *Pad {
	pp, ok := kv.(kernels.PadPager)
	if !ok || pp.PadPage() < 0 {
		return nil
	}
	p := &Pad{Page: pp.PadPage()}
	if gdn != nil {
		ps, ok := gdn.(kernels.PadSlotter)
		if !ok || ps.PadSlot() < 0 {
			return nil
		}
		p.Slot = ps.PadSlot()
	}
	return p
}

// PadDecode returns the decode step in grown to rows rows by pad rows:
// token 0, position 0, each a one-token sequence (Seq.Pad) in the pad slot
// whose one page is the pad page, each an output row.
func PadDecode(in kernels.StepInputs, rows int, pad Pad) kernels.StepInputs {
	n := in.Batch.Rows()
	b := &kernels.Batch{
		Positions: append(slices.Clone(in.Batch.Positions), make([]int32, rows-n)...),
		Seqs:      slices.Clone(in.Batch.Seqs),
	}
	out := slices.Clone(in.Rows)
	for i := n; i < rows; i++ {
		b.Seqs = append(b.Seqs, kernels.Seq{Slot: pad.Slot, Start: i, Len: 1, Pages: []int32{pad.Page}, Pad: true})
		out = append(out, i)
	}
	return kernels.StepInputs{Tokens: append(slices.Clone(in.Tokens), make([]int32, rows-n)...), Batch: b, Rows: out}
}

// PaddedState is implemented by states that can say where their pad rows
// go (PadOf over their pools).
type PaddedState interface {
	State
	Pad() *Pad // nil: no place for pad rows
}

// WarmDecode records the decode step of every bucket the backend pads
// steps of up to maxRows rows to (kernels.DecodePadder.DecodeBuckets), as
// vLLM captures its CUDA graphs before it serves: each bucket's step of
// pad rows alone runs twice through m.Forward (a recording backend runs a
// new step eagerly once, then records it), so no request's step pays for a
// recording later. It returns the buckets warmed: none where the backend
// does not pad or st keeps no pad place. Pad rows touch only the pad slot
// and page, which no request owns.
func WarmDecode(be kernels.Backend, m Model, st State, maxRows int) ([]int, error) {
	padder, ok := be.(kernels.DecodePadder)
	ps, ok2 := st.(PaddedState)
	if !ok || !ok2 {
		return nil, nil
	}
	pad := ps.Pad()
	if pad == nil {
		return nil, nil
	}
	buckets := padder.DecodeBuckets(maxRows)
	for _, n := range buckets {
		in := PadDecode(kernels.StepInputs{Batch: &kernels.Batch{}}, n, *pad)
		for range 2 {
			if _, err := m.Forward(be, st, in.Tokens, in.Batch, in.Rows); err != nil {
				return nil, fmt.Errorf("model: warming the decode step of %d rows: %w", n, err)
			}
			if sr, ok := be.(kernels.ScratchResetter); ok {
				sr.ResetScratch()
			}
		}
	}
	return buckets, nil
}
