//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"cohort/kernels"
)

// argmaxBlocks is the blocks that reduce one row of logits (a 248k
// vocabulary is then about 1k values per thread of 256).
const argmaxBlocks = 32

// Argmax returns the index of the largest logit of every row of logits
// [rows, vocab] (the lowest on ties; NaN never wins), computed on the
// device: only the ids are copied to the host (kernels.DeviceSampler).
func (b *Backend) Argmax(logits kernels.Tensor) []int32 {
	const op = "Argmax"
	t := b.tensor(op, logits)
	rows, n := t.dims()
	ids := make([]int32, rows)
	if rows == 0 || n == 0 {
		return ids
	}
	best := b.allocScratch(op, int64(rows)*8)
	if err := memsetD32(best, 0, int64(rows)*2); err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
	b.launch(op, "argmax_rows", [3]int{argmaxBlocks, rows, 1}, [3]int{256, 1, 1}, 0, best, t.ptr, n)
	dids := b.allocScratch(op, int64(rows)*4)
	b.launch(op, "argmax_ids", [3]int{(rows + 255) / 256, 1, 1}, [3]int{256, 1, 1}, 0, dids, best, t.ptr, n, rows)
	if err := memcpyDtoH(unsafe.Pointer(&ids[0]), dids, int64(rows)*4); err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
	return ids
}
