//go:build cuda

package cuda

import "os"

// kvType resolves Options.Weights and Options.KV (then their environment
// variables) as New does, to whether the cache is bf16.
func kvType(o Options) (bool, error) {
	weights, err := weightType(o.Weights)
	if err != nil {
		return false, err
	}
	kv := o.KV
	if kv == "" {
		kv = os.Getenv("COHORT_CUDA_KV")
	}
	return parseKVType(kv, weights)
}

// KVElemBytes is the size of one KV cache element of a Backend that New(o)
// would make (4 or 2), for the capacity plan (model.CapacityInput.ElemBytes).
func KVElemBytes(o Options) (int, error) {
	bf16, err := kvType(o)
	if err != nil {
		return 0, err
	}
	return int(kvElemBytes(bf16)), nil
}
