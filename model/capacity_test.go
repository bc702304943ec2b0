package model

import (
	"strings"
	"testing"
)

// qwen4B is the Qwen3.5-4B text config (reference qwen35-model.md §1.3).
func qwen4B() *Config {
	c := &Config{HiddenSize: 2560, Heads: 16, KVHeads: 4, HeadDim: 256, LinearKeyHeads: 16, LinearValueHeads: 32,
		LinearKeyDim: 128, LinearValueDim: 128, ConvKernel: 4, Layers: make([]LayerKind, 32)}
	for i := range c.Layers {
		if (i+1)%4 == 0 {
			c.Layers[i] = FullAttention
		}
	}
	return c
}

func TestStateBytesMatchesSpec(t *testing.T) {
	c := qwen4B()
	// Spec: 51,511,296 B (49.125 MiB) per request at TP=1 with bf16 conv state.
	if got := c.StateBytes(Single, 2); got != 51511296 {
		t.Fatalf("4B state bytes = %d, want 51511296", got)
	}
	if got := c.StateBytes(Shard{0, 2}, 2); got != 51511296/2 {
		t.Fatalf("4B state bytes at TP=2 = %d, want half", got)
	}
	// Spec: 32 KiB of KV per token at TP=1 (8 full layers · 2 · 4 heads · 256 · 2 B).
	if got := c.KVBytesPerToken(Single, 2); got != 32768 {
		t.Fatalf("4B KV bytes per token = %d, want 32768", got)
	}
	if got := c.KVBytesPerToken(Shard{0, 8}, 2); got != 32768/4 {
		t.Fatalf("TP=8 replicates KV heads: got %d, want %d", got, 32768/4)
	}
}

func TestPlanCapacity(t *testing.T) {
	c := qwen4B()
	in := CapacityInput{Budget: 8 << 30, Reserve: 1 << 30, Scratch: 512 << 20, ElemBytes: 2, PageSize: 16, MaxSeqs: 256, MaxModelLen: 32768}
	got, err := c.PlanCapacity(Single, in)
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
	if _, err := c.PlanCapacity(Single, in); err == nil || !strings.Contains(err.Error(), "one request does not fit") {
		t.Fatalf("tiny budget: %v", err)
	}
}
