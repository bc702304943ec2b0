package model

import "fmt"

// StateSize is what one request's state costs on one rank; the
// architecture computes it (Architecture.StateSize).
type StateSize struct {
	// SlotBytes is the state a request holds whatever its length (conv and
	// recurrent state of linear-attention layers); 0 for a model whose
	// state is all KV.
	SlotBytes int64
	// TokenBytes is the KV one cached token occupies (all attention layers).
	TokenBytes int64
	// KVLayers is the number of layers that keep a KV cache (the work that
	// grows with the context).
	KVLayers int
}

// CapacityInput are the numbers that size one rank's request state.
type CapacityInput struct {
	Budget      int64 // bytes this rank may spend on request state and scratch
	Reserve     int64 // bytes kept free for the runtime
	Scratch     int64 // prefill activation scratch estimate
	ElemBytes   int   // bytes per KV/conv element on this backend (4 on CPU, 2 for bf16)
	PageSize    int   // tokens per KV page
	MaxSeqs     int   // upper bound on concurrent requests
	MaxModelLen int   // longest request (prompt + generation) that must fit alone
}

// Capacity is what one rank can hold.
type Capacity struct {
	StateBytes  int64 // fixed state per request (StateSize.SlotBytes)
	PageBytes   int64 // KV bytes per page (all attention layers)
	Slots       int   // concurrent requests
	Pages       int   // KV pages
	PageSize    int
	MaxModelLen int
}

// PlanCapacity sizes the rank of shard s for the checkpoint's architecture
// (see PlanCapacity).
func (c *Checkpoint) PlanCapacity(s Shard, in CapacityInput) (Capacity, error) {
	return PlanCapacity(c.Arch.StateSize(c.Config, s, in.ElemBytes), s, in)
}

// PlanCapacity splits the budget between request slots and KV pages: at most
// half of it goes to state slots (capped by MaxSeqs; a model without slot
// state gets MaxSeqs slots for free), the rest to pages. It fails, listing
// the numbers, when even one request of MaxModelLen tokens does not fit.
func PlanCapacity(size StateSize, s Shard, in CapacityInput) (Capacity, error) {
	out := Capacity{StateBytes: size.SlotBytes, PageSize: in.PageSize, MaxModelLen: in.MaxModelLen}
	out.PageBytes = size.TokenBytes * int64(in.PageSize)
	avail := in.Budget - in.Reserve - in.Scratch
	needPages := int64((in.MaxModelLen + in.PageSize - 1) / in.PageSize)
	one := out.StateBytes + needPages*out.PageBytes
	if in.PageSize < 1 || in.MaxSeqs < 1 || in.MaxModelLen < 1 || avail < one || out.PageBytes <= 0 {
		return out, fmt.Errorf("model: capacity: one request does not fit on rank %d: budget %d B - reserve %d B - scratch %d B = %d B available; "+
			"one request needs %d B of slot state + %d pages × %d B of KV for %d tokens = %d B (page size %d, max seqs %d)",
			s.Rank, in.Budget, in.Reserve, in.Scratch, avail, out.StateBytes, needPages, out.PageBytes, in.MaxModelLen, one, in.PageSize, in.MaxSeqs)
	}
	slots := int64(in.MaxSeqs)
	if out.StateBytes > 0 {
		slots = min(slots, max(1, (avail/2)/out.StateBytes))
	}
	out.Slots = int(slots)
	out.Pages = int((avail - slots*out.StateBytes) / out.PageBytes)
	return out, nil
}
