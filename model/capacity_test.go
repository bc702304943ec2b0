package model

import (
	"strings"
	"testing"
)

func TestPlanCapacity(t *testing.T) {
	// Qwen3.5-4B's sizes at TP=1 in bf16 (qwen35-model.md §3).
	size := StateSize{SlotBytes: 51511296, TokenBytes: 32768, KVLayers: 8}
	in := CapacityInput{Budget: 8 << 30, Reserve: 1 << 30, ElemBytes: 2, PageSize: 16, MaxSeqs: 256, MaxModelLen: 32768}
	got, err := PlanCapacity(size, Single, in)
	if err != nil {
		t.Fatal(err)
	}
	avail := in.Budget - in.Reserve
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

// TestPlanCapacitySnapshots: snapshot places come out of the budget before
// slots and pages, the automatic share is an eighth of what is available,
// a model without slot state gets none, and an explicit size that leaves
// no room for one request fails.
func TestPlanCapacitySnapshots(t *testing.T) {
	size := StateSize{SlotBytes: 1 << 20, TokenBytes: 1024, KVLayers: 4}
	base := CapacityInput{Budget: 64 << 20, Reserve: 8 << 20, ElemBytes: 2, PageSize: 16, MaxSeqs: 8, MaxModelLen: 256}
	for _, c := range []struct {
		name      string
		snapshots int64
		slotBytes int64
		want      int
	}{
		{"none", 0, 1 << 20, 0},
		{"explicit", 10 << 20, 1 << 20, 10},
		{"auto: an eighth of 56 MiB", -1, 1 << 20, 7},
		{"no slot state", -1, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			in, sz := base, size
			in.Snapshots, sz.SlotBytes = c.snapshots, c.slotBytes
			got, err := PlanCapacity(sz, Single, in)
			if err != nil {
				t.Fatal(err)
			}
			used := int64(got.Snapshots+got.Slots)*got.StateBytes + int64(got.Pages)*got.PageBytes
			if got.Snapshots != c.want || used > in.Budget-in.Reserve {
				t.Fatalf("%d places (want %d), %d B used of %d", got.Snapshots, c.want, used, in.Budget-in.Reserve)
			}
		})
	}
	in := base
	in.Snapshots = 60 << 20
	if _, err := PlanCapacity(size, Single, in); err == nil || !strings.Contains(err.Error(), "snapshots leave no room") {
		t.Fatalf("snapshots larger than the budget: %v", err)
	}
}
