package model

import "fmt"

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
	StateBytes  int64 // GDN conv + fp32 recurrent state per request
	PageBytes   int64 // KV bytes per page (all full-attention layers)
	Slots       int   // concurrent requests
	Pages       int   // KV pages
	PageSize    int
	MaxModelLen int
}

// StateBytes returns the per-request GDN state on one rank: for every GDN
// layer the conv state [(K-1), convDim/tp] and the fp32 recurrent state
// [nv/tp, dk, dv].
func (c *Config) StateBytes(s Shard, elemBytes int) int64 {
	nv := int64(c.LinearValueHeads / s.Size)
	conv := int64(2*c.LinearKeyHeads*c.LinearKeyDim+c.LinearValueHeads*c.LinearValueDim) / int64(s.Size)
	per := nv*int64(c.LinearKeyDim*c.LinearValueDim)*4 + int64(c.ConvKernel-1)*conv*int64(elemBytes)
	return per * int64(c.CountLayers(LinearAttention))
}

// KVBytesPerToken returns the KV bytes one token occupies on one rank
// (KV heads are replicated when there are fewer than ranks).
func (c *Config) KVBytesPerToken(s Shard, elemBytes int) int64 {
	kv := max(c.KVHeads/s.Size, 1)
	return int64(c.CountLayers(FullAttention)) * 2 * int64(kv*c.HeadDim*elemBytes)
}

// PlanCapacity splits the budget between request slots and KV pages: at most
// half of it goes to GDN state slots (capped by MaxSeqs), the rest to pages.
// It fails, listing the numbers, when even one request of MaxModelLen tokens
// does not fit.
func (c *Config) PlanCapacity(s Shard, in CapacityInput) (Capacity, error) {
	out := Capacity{StateBytes: c.StateBytes(s, in.ElemBytes), PageSize: in.PageSize, MaxModelLen: in.MaxModelLen}
	out.PageBytes = c.KVBytesPerToken(s, in.ElemBytes) * int64(in.PageSize)
	avail := in.Budget - in.Reserve - in.Scratch
	needPages := int64((in.MaxModelLen + in.PageSize - 1) / in.PageSize)
	one := out.StateBytes + needPages*out.PageBytes
	if in.PageSize < 1 || in.MaxSeqs < 1 || in.MaxModelLen < 1 || avail < one {
		return out, fmt.Errorf("model: capacity: one request does not fit on rank %d: budget %d B - reserve %d B - scratch %d B = %d B available; "+
			"one request needs %d B of GDN state + %d pages × %d B of KV for %d tokens = %d B (page size %d, max seqs %d)",
			s.Rank, in.Budget, in.Reserve, in.Scratch, avail, out.StateBytes, needPages, out.PageBytes, in.MaxModelLen, one, in.PageSize, in.MaxSeqs)
	}
	slots := min(int64(in.MaxSeqs), max(1, (avail/2)/out.StateBytes))
	out.Slots = int(slots)
	out.Pages = int((avail - slots*out.StateBytes) / out.PageBytes)
	return out, nil
}
