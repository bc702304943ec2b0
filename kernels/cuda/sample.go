//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"cohort/kernels"
)

var _ kernels.DeviceSampler = (*Backend)(nil)

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

// Sample draws one token from every row of logits [rows, vocab] as rows
// describes it (kernels.DeviceSampler): the adjustments, temperature,
// filters and draw of model/sample, on the device; only the ids, and the
// logprobs and alternatives asked for, are copied to the host. Three
// kernels run (see kernels/72_sample.cu); the scratch holds a float64 work
// row for every row that draws at a temperature or adjusts its logits. A
// row's results depend on its logits and description alone, not on the
// other rows of the call.
func (b *Backend) Sample(logits kernels.Tensor, rows []kernels.SampleRow) []kernels.SampleResult {
	const op = "Sample"
	t := b.tensor(op, logits)
	nrows, n := t.dims()
	if len(rows) != nrows {
		panic(fmt.Sprintf("cuda: %s: %d row descriptions for logits %v", op, len(rows), t.shape))
	}
	if nrows == 0 || n == 0 {
		return make([]kernels.SampleResult, nrows)
	}
	args := encodeSampleRows(op, rows, n)
	spb := min(sampleMaxBlocks, n) // by the vocabulary alone, so a row's sums do not depend on its batch
	chunk := (n + spb - 1) / spb
	work := b.allocScratch(op, int64(max(args.pslots, 1))*int64(n)*8)
	parts := b.allocScratch(op, int64(nrows*spb)*samplePartBytes)
	outs := b.allocScratch(op, int64(nrows)*sampleOutBytes)
	dargs := b.uploadInts(op, args.rows, nil)
	dadj := b.uploadInts(op, args.adjust, nil)
	b.launch(op, "sample_prep", [3]int{spb, nrows, 1}, [3]int{samplePrepThreads, 1, 1}, 0, work, parts, t.ptr, n, chunk, dargs, dadj)
	b.launch(op, "sample_exp", [3]int{spb, nrows, 1}, [3]int{samplePrepThreads, 1, 1}, 0, work, parts, t.ptr, n, chunk, dargs)
	b.allowSmem(op, "sample_rows", sampleSmem)
	b.launch(op, "sample_rows", [3]int{nrows, 1, 1}, [3]int{sampleThreads, 1, 1}, sampleSmem, outs, work, parts, t.ptr, n, spb, dargs)
	host := make([]byte, nrows*sampleOutBytes)
	if err := memcpyDtoH(unsafe.Pointer(&host[0]), outs, int64(len(host))); err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
	return decodeSampleOuts(host, rows)
}
