//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"cohort/kernels"
)

// weightType resolves Options.Weights.
func weightType(opt string) (string, error) {
	if opt == "" {
		opt = os.Getenv("COHORT_CUDA_WEIGHTS")
	}
	switch opt {
	case "", "bf16":
		return "bf16", nil
	case "f32":
		return "f32", nil
	}
	return "", fmt.Errorf("cuda: weight type %q: want bf16 or f32 (Options.Weights, COHORT_CUDA_WEIGHTS)", opt)
}

// bf16MinDim is the smallest dimension of a matrix stored as bf16: smaller
// 2-D weights (a flattened conv1d kernel [channels, 4]) stay float32.
const bf16MinDim = 16

// UploadWeight stores a checkpoint tensor. With bf16 weights (the default)
// every matrix, 2-D with both dimensions at least bf16MinDim, is stored as
// bfloat16 (rounded to nearest even), read only by Linear and Embedding;
// everything else, and every weight under "f32" or without cuBLASLt, is
// stored as Upload stores it.
func (b *Backend) UploadWeight(data []float32, shape ...int) kernels.Tensor {
	if b.weights != "bf16" || b.gemm != "cublaslt" || len(shape) != 2 || min(shape[0], shape[1]) < bf16MinDim {
		return b.Upload(data, shape...)
	}
	n := numel("UploadWeight", shape)
	if n != len(data) {
		panic(fmt.Sprintf("cuda: UploadWeight: %d values for shape %v", len(data), shape))
	}
	host := toBF16(data)
	t := &Tensor{shape: slices.Clone(shape), n: n, bf16: true, ptr: b.allocPermanent("UploadWeight", int64(n)*2)}
	if err := memcpyHtoD(t.ptr, unsafe.Pointer(&host[0]), int64(n)*2); err != nil {
		panic(fmt.Sprintf("cuda: UploadWeight %v: %v", shape, err))
	}
	return t
}

// toBF16 rounds data to bfloat16, in parallel for large weights.
func toBF16(data []float32) []uint16 {
	out := make([]uint16, len(data))
	const part = 1 << 20
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for lo := 0; lo < len(data); lo += part {
		hi := min(lo+part, len(data))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for i, v := range data[lo:hi] {
				out[lo+i] = bf16Bits(v)
			}
		})
	}
	wg.Wait()
	return out
}

// bf16Bits rounds v to bfloat16, nearest even (as torch's .to(bfloat16)).
func bf16Bits(v float32) uint16 {
	u := math.Float32bits(v)
	if u&0x7fffffff > 0x7f800000 {
		return 0x7fc0
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// downloadBF16 copies a bf16 tensor to the host as float32.
func (b *Backend) downloadBF16(t *Tensor) []float32 {
	out := make([]float32, t.n)
	if t.n == 0 {
		return out
	}
	host := make([]uint16, t.n)
	if err := memcpyDtoH(unsafe.Pointer(&host[0]), t.ptr, int64(t.n)*2); err != nil {
		panic(fmt.Sprintf("cuda: Download %v: %v", t.shape, err))
	}
	for i, h := range host {
		out[i] = math.Float32frombits(uint32(h) << 16)
	}
	return out
}

// gemvMaxRows is GEMV_MAX_ROWS of kernels/35_bf16.cu: the most activation
// rows the bf16 GEMV serves; more rows go through cuBLASLt.
const gemvMaxRows = 8

// gemvWarps is the warps (output columns) of one gemv_bf16 block.
const gemvWarps = 8

// linearBF16 computes y[T, N] = x[T, K]·w[N, K]ᵀ with bf16 w: a
// bandwidth-bound GEMV kernel for decode-sized T, else x rounded to bf16 and
// a bf16 cuBLASLt GEMM with fp32 accumulation and output.
func (b *Backend) linearBF16(op string, y, x, w *Tensor, T, K, N int) {
	if T <= gemvMaxRows && K%8 == 0 {
		b.launch(op, "gemv_bf16", [3]int{(N + gemvWarps - 1) / gemvWarps, 1, 1}, [3]int{32, gemvWarps, 1}, 0,
			y.ptr, x.ptr, w.ptr, T, K, N)
		return
	}
	n := int64(T) * int64(K)
	xb := b.allocScratch(op, n*2)
	b.launch(op, "f32_to_bf16", [3]int{b.grid1(n, 256), 1, 1}, [3]int{256, 1, 1}, 0, xb, x.ptr, n)
	b.ltGemm(op, ltKey{bf16: true, transA: true, m: N, n: T, k: K, lda: K, ldb: K, ldd: N}, w.ptr, xb, y.ptr)
}

// ltGemm runs a cuBLASLt matmul, preparing and caching its plan on first use.
func (b *Backend) ltGemm(op string, key ltKey, a, bm, d devptr) {
	p, ok := b.plans[key]
	if !ok {
		var err error
		if p, err = newLtPlan(b.lt, key, b.wsSize); err != nil {
			panic(fmt.Sprintf("cuda: %s: GEMM plan %+v: %v", op, key, err))
		}
		b.plans[key] = p
	}
	if b.graph.skip(op, "cublasLtMatmul", uint64(a), uint64(bm), uint64(d)) {
		return
	}
	if err := p.run(b.lt, a, bm, d, b.ws); err != nil {
		panic(fmt.Sprintf("cuda: %s: GEMM %+v: %v", op, key, err))
	}
	if b.syncLaunch && b.graph.mode == graphOff {
		if err := ctxSynchronize(); err != nil {
			panic(fmt.Sprintf("cuda: %s: GEMM: %v", op, err))
		}
	}
}
