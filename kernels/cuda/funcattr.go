//go:build cuda

package cuda

/*
#include <cuda.h>

static CUresult cw_set_max_dynamic_smem(void *fn, int bytes) {
	return cuFuncSetAttribute((CUfunction)fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}
*/
import "C"

import "fmt"

// setMaxDynamicSmem lets f launch with up to bytes of dynamic shared memory
// (above 48 KiB a kernel must opt in).
func setMaxDynamicSmem(f function, bytes int) error {
	return cuCheck("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", C.cw_set_max_dynamic_smem(rawFunction(f), C.int(bytes)))
}

// allowSmem opts kernel name in to bytes of dynamic shared memory, once per
// kernel and size (the backend's smem map remembers what was set).
func (b *Backend) allowSmem(op, name string, bytes int) {
	if bytes <= 48<<10 || b.smem[name] >= bytes {
		return
	}
	f, ok := b.funcs[name]
	if !ok {
		panic(fmt.Sprintf("cuda: %s: no kernel %s", op, name))
	}
	if err := setMaxDynamicSmem(f, bytes); err != nil {
		panic(fmt.Sprintf("cuda: %s: %s: %v", op, name, err))
	}
	if b.smem == nil {
		b.smem = map[string]int{}
	}
	b.smem[name] = bytes
}
