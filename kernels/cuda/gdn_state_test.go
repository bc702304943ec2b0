package cuda

import (
	"math"
	"testing"
)

// TestGDNStateOption: COHORT_CUDA_GDN_STATE's values, the bf16 entries'
// names (every one a kernel of the module) and element sizes.
func TestGDNStateOption(t *testing.T) {
	for _, c := range []struct {
		v    string
		bf16 bool
		ok   bool
	}{{"", false, true}, {"f32", false, true}, {"bf16", true, true}, {"BF16", false, false}, {"fp32", false, false}} {
		bf16, err := gdnStateFromEnv(c.v)
		if bf16 != c.bf16 || (err == nil) != c.ok {
			t.Errorf("gdnStateFromEnv(%q) = %v, %v", c.v, bf16, err)
		}
	}
	names := map[string]bool{}
	for _, n := range kernelNames {
		names[n] = true
	}
	for _, n := range []string{"gdn_recurrent_f32", "gdn_recurrent_cols_f32", "gdn_recurrent_cols_wide_f32", "gdn_recurrent_cols_pipe_f32",
		"gdn_decode_cols_f32", "gdn_decode_cols_wide_f32", "gdn_chunk_scan_f32", "gdn_chunk_scan_mma_f32", "gdn_chunk_state_mma_f32"} {
		if gdnStateKernel(n, false) != n {
			t.Errorf("f32 state: %s -> %s", n, gdnStateKernel(n, false))
		}
		if b := gdnStateKernel(n, true); !names[b] || b == n {
			t.Errorf("bf16 state: %s -> %s, not a listed kernel", n, b)
		}
	}
	if gdnStateElem(false) != 4 || gdnStateElem(true) != 2 {
		t.Errorf("element bytes %d, %d", gdnStateElem(false), gdnStateElem(true))
	}
	if gdnStateCheck(3, true) == nil || gdnStateCheck(3, false) != nil || gdnStateCheck(4, true) != nil {
		t.Errorf("gdnStateCheck: odd sizes are refused for bf16 only")
	}
	got := widenBF16([]uint16{0x3f80, 0xbf80, 0x0000, 0x8000, 0x7f80, 0x3fc0})
	want := []float32{1, -1, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), 1.5}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("widenBF16[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}
