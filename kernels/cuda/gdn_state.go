package cuda

import (
	"fmt"
	"math"
)

// The GDN recurrent state's storage type (COHORT_CUDA_GDN_STATE): float32
// by default ("" or "f32"), or "bf16": the state pool stores every element
// of the recurrent state [layer][slot][vHeads][dk][dv] as a bfloat16
// (rounded to nearest even when a kernel stores it) and every kernel that
// reads it widens it to float32 and computes exactly as with the f32 state.
// The kernels are the *_sbf16 entries of kernels/50_gdn.cu and
// kernels/55_gdn_chunk.cu (the same templates over the storage type), so
// the f32 entries are untouched. The conv state stays float32. Snapshot and
// SetSlot keep the float32 host format (widened, rounded).
//
// Capacity planning (model.StateSize) keeps counting 4 bytes a recurrent
// element: with the bf16 state it over-reserves (a slot and a snapshot
// place take less than planned), which is safe.

// gdnStateSuffix is the suffix of the bf16-state kernel entries.
const gdnStateSuffix = "_sbf16"

// gdnStateFromEnv parses COHORT_CUDA_GDN_STATE.
func gdnStateFromEnv(v string) (bf16 bool, err error) {
	switch v {
	case "", "f32":
		return false, nil
	case "bf16":
		return true, nil
	}
	return false, fmt.Errorf("COHORT_CUDA_GDN_STATE=%q: want f32 (the default) or bf16", v)
}

// gdnStateKernel returns the entry of kernel name (an f32-state GDN entry)
// for the state type: name itself, or its _sbf16 twin.
func gdnStateKernel(name string, bf16 bool) string {
	if bf16 {
		return name + gdnStateSuffix
	}
	return name
}

// gdnStateElem is the bytes of one recurrent state element.
func gdnStateElem(bf16 bool) int64 {
	if bf16 {
		return 2
	}
	return 4
}

// gdnStateCheck reports whether a pool of per-slot recurrent size n (the
// elements of one layer's slot) can hold the state type: the bf16 state
// needs n even, so that every slot's state starts 4-byte aligned (the
// pool is zeroed with 32-bit memsets).
func gdnStateCheck(n int64, bf16 bool) error {
	if bf16 && n%2 != 0 {
		return fmt.Errorf("COHORT_CUDA_GDN_STATE=bf16: a slot's recurrent state has %d elements, want an even count", n)
	}
	return nil
}

// widenBF16 returns bfloat16 bits as float32s (exact).
func widenBF16(bits []uint16) []float32 {
	out := make([]float32, len(bits))
	for i, b := range bits {
		out[i] = math.Float32frombits(uint32(b) << 16)
	}
	return out
}
