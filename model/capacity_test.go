package model

import (
	"strings"
	"testing"
)

func TestPlanCapacity(t *testing.T) {
	// Qwen3.5-4B's sizes at TP=1 in bf16 (qwen35-model.md §3).
	size := StateSize{SlotBytes: 51511296, TokenBytes: 32768, KVLayers: 8}
	in := CapacityInput{Budget: 8 << 30, Reserve: 1 << 30, Scratch: 512 << 20, ElemBytes: 2, PageSize: 16, MaxSeqs: 256, MaxModelLen: 32768}
	got, err := PlanCapacity(size, Single, in)
	if err != nil {
		t.Fatal(err)
	}
	avail := in.Budget - in.Reserve - in.Scratch
	if got.Slots < 1 || int64(got.Slots)*got.StateBytes > avail/2 {
		t.Fatalf("slots %d use more than half of %d", got.Slots, avail)
	}
	if used := int64(got.Slots)*got.StateBytes + int64(got.Pages)*got.PageBytes; used > avail || avail-used >= got.PageBytes {
		t.Fatalf("used %d of %d available: not a tight fit", used, avail)
	}
	in.Budget = 2 << 30
	if _, err := PlanCapacity(size, Single, in); err == nil || !strings.Contains(err.Error(), "one request does not fit") {
		t.Fatalf("tiny budget: %v", err)
	}
}

// TestPlanCapacityWithoutSlotState: a model whose state is all KV gets
// MaxSeqs slots and spends the whole budget on pages.
func TestPlanCapacityWithoutSlotState(t *testing.T) {
	size := StateSize{TokenBytes: 1024, KVLayers: 4}
	in := CapacityInput{Budget: 1 << 20, ElemBytes: 2, PageSize: 16, MaxSeqs: 8, MaxModelLen: 256}
	got, err := PlanCapacity(size, Single, in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Slots != 8 || got.Pages != (1<<20)/(16*1024) || got.StateBytes != 0 {
		t.Fatalf("got %+v", got)
	}
}
