//go:build cuda

package cuda

import (
	"math"
	"os"

	"cohort/kernels"
)

// gdnNormFused sends batch-1 decode steps' GDN mixers to
// gdn_decode_norm_cols_f32: the decode kernel applies the gated RMSNorm
// itself, one launch fewer a layer. COHORT_CUDA_GDN_NORM=0 keeps the two
// launches (A/B runs).
var gdnNormFused = os.Getenv("COHORT_CUDA_GDN_NORM") != "0"

// l2Next has a kernel that leaves DRAM idle (the batch-1 GDN decode) ask
// L2 for the weights of the one projection that reads its output, so that
// the projection's GEMV finds them there. Measured on an H100 (cohort
// bench, batch 1, alternated): 3.868 and 3.838 ms/token against 3.884 and
// 3.901 without. COHORT_CUDA_L2_NEXT=0 turns it off.
var l2Next = os.Getenv("COHORT_CUDA_L2_NEXT") != "0"

// nextWeight is the address and size of the bf16 weight that alone reads an
// op's output (readers, kernels.LinearFeeder) for l2_prefetch_share, or
// zeros when l2Next is off or there is not exactly one such weight.
func (b *Backend) nextWeight(op string, readers []kernels.Tensor) (devptr, int64) {
	if !l2Next || len(readers) != 1 {
		return 0, 0
	}
	wt := b.weight(op, readers[0])
	if !wt.bf16 {
		return 0, 0
	}
	return wt.ptr, int64(wt.n) * 2
}

// GatedDeltaRuleNorm is kernels.DeltaRuleNormer: GatedDeltaRule and then
// the gated RMSNorm n of its output, in one launch where the batch takes
// gdn_decode_cols_f32 and the weight is one head long (the norm's parts in the split workspace, its
// per-head counters those of the GEMVs: kernels of one stream, each of
// which leaves them zero before the next reads them).
func (b *Backend) GatedDeltaRuleNorm(n kernels.GatedNorm, mixed, beta, a, aLog, dtBias kernels.Tensor, states kernels.StatePool, layer int, bt *kernels.Batch, cfg kernels.GDNConfig) kernels.Tensor {
	const op = "GatedDeltaRuleNorm"
	name, w := b.gdnDecodeKernel(bt, cfg, gdnWarps(cfg.KeyDim))
	nv, dv := cfg.ValueHeads, cfg.ValueDim
	wt := b.tensor(op, n.W)
	if !gdnNormFused || name != "gdn_decode_cols_f32" || len(bt.Seqs)*nv > mmaCounters || wt.n != dv {
		o := b.GatedDeltaRule(mixed, beta, a, aLog, dtBias, states, layer, bt, cfg)
		return b.gatedRMSNorm("GatedRMSNorm", o, n.Z, n.W, n.Eps, n.Readers)
	}
	d := b.deltaRuleOperands(op, mixed, beta, a, aLog, dtBias, states, bt, cfg)
	zt, T := b.tensor(op, n.Z), d.T
	out := b.newTensor(op, T, nv*dv)
	check(op, kernels.CheckSame(out.shape, zt.shape))
	y := b.newTensor(op, T, nv*dv)
	yp, yb := b.outputs(op, y, n.Readers)
	zBlocks := (dv + 31) / 32
	ws := b.allocScratch(op, int64(T*nv*zBlocks*8))
	start, length, slot := b.seqMeta(op, d.p, layer, bt)
	pf, pfBytes := b.nextWeight(op, n.Readers)
	args := append(gdnDecodeArgs(out, d, start, length, slot, layer, cfg), yp, yb, zt.ptr, wt.ptr, ws, b.mmaCnt, n.Eps, pf, pfBytes)
	b.launch(op, d.p.kernel("gdn_decode_norm_cols_f32"), [3]int{len(bt.Seqs), nv, zBlocks}, [3]int{32, w, 1},
		gdnDecodeShmem(cfg.KeyDim, w), args...)
	return y
}

// gdnDecodeShmem is the decode kernels' dynamic shared memory for key dim
// dk and w warps a block.
func gdnDecodeShmem(dk, w int) int { return (2*dk+2*32*w)*4 + 2*w*8 }

// gdnDecodeArgs are the arguments the decode kernels (gdn_decode_cols_f32
// and its forms) share.
func gdnDecodeArgs(out *Tensor, d deltaRuleOperands, start, length, slot devptr, layer int, cfg kernels.GDNConfig) []any {
	scale := 1 / float32(math.Sqrt(float64(cfg.KeyDim)))
	return []any{out.ptr, d.mixed.ptr, d.beta.ptr, d.a.ptr, d.aLog.ptr, d.dtBias.ptr, d.p.rec, start, length, slot,
		cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim, d.convDim, d.p.slots, layer, scale}
}
