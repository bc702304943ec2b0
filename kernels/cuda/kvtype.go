package cuda

import (
	"fmt"
	"strings"
)

// The KV cache's element type: bf16 (the default with bf16 weights:
// COHORT_CUDA_KV=bf16, Options.KV), each k and v value rounded to nearest
// even when kv_write_bf16 stores it, or float32 (the default with
// COHORT_CUDA_WEIGHTS=f32, which stays exact; COHORT_CUDA_KV=f32), twice
// the bytes. Every kernel that reads the cache has a *_kvbf16 twin
// (kernels/40_attention.cu, kernels/45_attention_prefill.cu) that loads
// bf16 and widens it to float32; kvEntry picks it. A cache keeps the type
// it was made with.

// parseKVType reads COHORT_CUDA_KV / Options.KV: "f32" is float32, "bf16"
// is bf16, and "" the default for weights of type weights (weightType):
// bf16 for "bf16", float32 for "f32".
func parseKVType(s, weights string) (bf16 bool, err error) {
	switch s {
	case "":
		return weights == "bf16", nil
	case "f32":
		return false, nil
	case "bf16":
		return true, nil
	}
	return false, fmt.Errorf("cuda: KV cache type %q: want f32 or bf16", s)
}

// kvEntry returns the entry that does the work of the float32 cache's
// entry name over a cache of bf16 elements, or name itself for float32.
func kvEntry(name string, bf16 bool) string {
	if !bf16 {
		return name
	}
	switch {
	case name == "kv_write_f32":
		return "kv_write_bf16"
	case name == "attention_f32":
		return "attention_kvbf16"
	case strings.HasPrefix(name, "attention_decode_g"):
		return "attention_decode_kvbf16_" + strings.TrimPrefix(name, "attention_decode_")
	case strings.HasPrefix(name, "attention_prefill_split_hd"):
		return "attention_prefill_split_kvbf16_" + strings.TrimPrefix(name, "attention_prefill_split_")
	case strings.HasPrefix(name, "attention_prefill_hd"):
		return "attention_prefill_kvbf16_" + strings.TrimPrefix(name, "attention_prefill_")
	}
	panic(fmt.Sprintf("cuda: no bf16 KV cache twin of kernel %s", name))
}

// kvElemBytes is the size of one cache element.
func kvElemBytes(bf16 bool) int64 {
	if bf16 {
		return 2
	}
	return 4
}
