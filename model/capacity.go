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
//
// The budget is for request state alone (slots, KV pages, snapshots). A
// rank whose backend has a device scratch arena of its own
// (kernels.ScratchArena) holds the scratch of its largest step beside it:
// it measures that step (MaxStepTokens, MaxStepOutputs) and reserves the
// arena before it reads the device's free memory, so an unset budget is
// what is free once the weights and the scratch are in (see the rank's
// budgetFromDevice and docs/gpu.md).
type CapacityInput struct {
	Budget      int64 // bytes this rank may spend on request state (0: the device's free memory)
	Reserve     int64 // bytes of the budget kept free for the runtime
	ElemBytes   int   // bytes per KV cache element on this backend (4 on CPU, 2 for a bf16 cache)
	PageSize    int   // tokens per KV page
	MaxSeqs     int   // upper bound on concurrent requests
	MaxModelLen int   // longest request (prompt + generation) that must fit alone
	// MaxStepTokens is the most tokens one step may bring the rank
	// (prefill chunks and decode rows), and MaxStepOutputs the most rows
	// whose logits it computes: the step whose scratch a device rank
	// reserves. The engine sets them from its step limits.
	MaxStepTokens  int
	MaxStepOutputs int
	// Snapshots is the bytes of state snapshot places for the prefix cache,
	// set aside before slots and pages are sized: 0 none, negative
	// AutoSnapshots of what is available. Each place is one slot's state
	// (StateSize.SlotBytes); a model without slot state needs none.
	Snapshots int64
}

// AutoSnapshots is the share of the available memory (budget − reserve)
// that CapacityInput.Snapshots < 0 gives the snapshots: an eighth, within
// what leaves one request of MaxModelLen room.
const AutoSnapshots = 8

// DeviceReserve is the reserve of a budget taken from the device's free
// memory when none is given: room for what the runtime allocates after the
// capacity plan (NCCL's lazily made connections, CUDA graphs, the chunked
// gated delta rule's workspace growing for a batch of many prompts, an
// arena that outgrows its measured step). Not yet measured on a GPU.
const DeviceReserve = 1 << 30

// Capacity is what one rank can hold.
type Capacity struct {
	StateBytes  int64 // fixed state per request (StateSize.SlotBytes)
	PageBytes   int64 // KV bytes per page (all attention layers)
	Slots       int   // concurrent requests
	Pages       int   // KV pages
	PageSize    int
	MaxModelLen int
	Snapshots   int // state snapshot places (the prefix cache)
	// Scratch is the device scratch the rank holds beside its state for
	// its largest step (0 where the backend needs no reservation); the
	// rank sets it, PlanCapacity does not.
	Scratch int64
}

// PlanCapacity sizes the rank of shard s for the checkpoint's architecture
// (see PlanCapacity).
func (c *Checkpoint) PlanCapacity(s Shard, in CapacityInput) (Capacity, error) {
	return PlanCapacity(c.Arch.StateSize(c.Config, s, in.ElemBytes), s, in)
}

// PlanCapacity splits the budget between request slots and KV pages: at most
// half of it goes to state slots (capped by MaxSeqs; a model without slot
// state gets MaxSeqs slots for free), the rest to pages. The prefix cache's
// state snapshots (CapacityInput.Snapshots) are set aside first, so the
// slots and pages it reports are what admission really has. It fails,
// listing the numbers, when even one request of MaxModelLen tokens does not
// fit (beside the snapshots asked for in bytes).
func PlanCapacity(size StateSize, s Shard, in CapacityInput) (Capacity, error) {
	out := Capacity{StateBytes: size.SlotBytes, PageSize: in.PageSize, MaxModelLen: in.MaxModelLen}
	out.PageBytes = size.TokenBytes * int64(in.PageSize)
	avail := in.Budget - in.Reserve
	needPages := int64((in.MaxModelLen + in.PageSize - 1) / in.PageSize)
	one := out.StateBytes + needPages*out.PageBytes
	if in.PageSize < 1 || in.MaxSeqs < 1 || in.MaxModelLen < 1 || avail < one || out.PageBytes <= 0 {
		return out, fmt.Errorf("model: capacity: one request does not fit on rank %d: budget %d B - reserve %d B = %d B available; "+
			"one request needs %d B of slot state + %d pages × %d B of KV for %d tokens = %d B (page size %d, max seqs %d)",
			s.Rank, in.Budget, in.Reserve, avail, out.StateBytes, needPages, out.PageBytes, in.MaxModelLen, one, in.PageSize, in.MaxSeqs)
	}
	out.Snapshots = snapshotPlaces(in, out.StateBytes, avail-one)
	if in.Snapshots > 0 && out.StateBytes > 0 && int64(out.Snapshots) < in.Snapshots/out.StateBytes {
		return out, fmt.Errorf("model: capacity: %d B of state snapshots leave no room for one request of %d tokens on rank %d (%d B available, %d B for the request)",
			in.Snapshots, in.MaxModelLen, s.Rank, avail, one)
	}
	avail -= int64(out.Snapshots) * out.StateBytes
	slots := int64(in.MaxSeqs)
	if out.StateBytes > 0 {
		slots = min(slots, max(1, (avail/2)/out.StateBytes))
	}
	out.Slots = int(slots)
	out.Pages = int((avail - slots*out.StateBytes) / out.PageBytes)
	return out, nil
}

// snapshotPlaces is how many snapshot places of slotBytes the input asks
// for, within spare bytes (what one request of MaxModelLen leaves).
func snapshotPlaces(in CapacityInput, slotBytes, spare int64) int {
	if slotBytes <= 0 || in.Snapshots == 0 {
		return 0
	}
	want := in.Snapshots
	if want < 0 {
		want = (in.Budget - in.Reserve) / AutoSnapshots
	}
	return int(min(want, spare) / slotBytes)
}
