package cuda

import (
	"slices"
	"testing"
)

func TestParseKVType(t *testing.T) {
	for _, c := range []struct {
		in, weights string
		bf16        bool
		ok          bool
	}{
		{"", "bf16", true, true}, // the default follows the weights
		{"", "f32", false, true},
		{"f32", "bf16", false, true},
		{"bf16", "f32", true, true},
		{"BF16", "bf16", false, false},
		{"fp8", "bf16", false, false},
	} {
		got, err := parseKVType(c.in, c.weights)
		if got != c.bf16 || (err == nil) != c.ok {
			t.Errorf("parseKVType(%q, weights %s) = %v, %v", c.in, c.weights, got, err)
		}
	}
}

// TestKVEntry: every float32-cache entry has a listed bf16 twin, and the
// float32 cache keeps its entries.
func TestKVEntry(t *testing.T) {
	for _, n := range []string{"kv_write_f32", "attention_f32", "attention_decode_g1", "attention_decode_g2", "attention_decode_g4",
		"attention_prefill_hd64", "attention_prefill_hd128", "attention_prefill_hd256",
		"attention_prefill_split_hd64", "attention_prefill_split_hd128", "attention_prefill_split_hd256"} {
		if got := kvEntry(n, false); got != n {
			t.Errorf("kvEntry(%s, f32) = %s", n, got)
		}
		b := kvEntry(n, true)
		if b == n || !slices.Contains(kernelNames, b) {
			t.Errorf("kvEntry(%s, bf16) = %s, not a listed kernel", n, b)
		}
	}
	if kvEntry("attention_prefill_split_hd128", true) != "attention_prefill_split_kvbf16_hd128" {
		t.Error("split entry mapped wrong")
	}
}
