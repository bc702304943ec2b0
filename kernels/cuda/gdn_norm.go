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

// GatedDeltaRuleNorm is kernels.DeltaRuleNormer: GatedDeltaRule and then
// the gated RMSNorm n of its output, in one launch where the batch takes
// gdn_decode_cols_f32 and the weight is one head long (the norm's parts in the split workspace, its
// per-head counters those of the GEMVs: kernels of one stream, each of
// which leaves them zero before the next reads them).
func (b *Backend) GatedDeltaRuleNorm(n kernels.GatedNorm, mixed, beta, a, aLog, dtBias kernels.Tensor, states kernels.StatePool, layer int, bt *kernels.Batch, cfg kernels.GDNConfig) kernels.Tensor {
	const op = "GatedDeltaRuleNorm"
	warps := min(max((cfg.KeyDim+7)/8, 1), 32)
	name, w := b.gdnDecodeKernel(bt, cfg, warps)
	nv, dv := cfg.ValueHeads, cfg.ValueDim
	wt := b.tensor(op, n.W)
	if !gdnNormFused || name != "gdn_decode_cols_f32" || len(bt.Seqs)*nv > mmaCounters || wt.n != dv {
		o := b.GatedDeltaRule(mixed, beta, a, aLog, dtBias, states, layer, bt, cfg)
		return b.gatedRMSNorm("GatedRMSNorm", o, n.Z, n.W, n.Eps, n.Readers)
	}
	mt, bt2, at := b.tensor(op, mixed), b.tensor(op, beta), b.tensor(op, a)
	alt, dtt := b.tensor(op, aLog), b.tensor(op, dtBias)
	zt := b.tensor(op, n.Z)
	p := asStatePool(op, states)
	check(op, kernels.CheckDeltaRule(mt.shape, bt2.shape, at.shape, alt.shape, dtt.shape, cfg, p.cfg))
	T, convDim := mt.dims()
	check(op, kernels.CheckBatch(bt, T, true))
	out := b.newTensor(op, T, nv*dv)
	check(op, kernels.CheckSame(out.shape, zt.shape))
	y := b.newTensor(op, T, nv*dv)
	yp, yb := b.outputs(op, y, n.Readers)
	zBlocks := (dv + 31) / 32
	ws := b.allocScratch(op, int64(T*nv*zBlocks*8))
	start, length, slot := b.seqMeta(op, p, layer, bt)
	args := append(gdnDecodeArgs(out, mt, bt2, at, alt, dtt, p, start, length, slot, layer, cfg, convDim),
		yp, yb, zt.ptr, wt.ptr, ws, b.mmaCnt, n.Eps)
	b.launch(op, p.kernel("gdn_decode_norm_cols_f32"), [3]int{len(bt.Seqs), nv, zBlocks}, [3]int{32, w, 1},
		gdnDecodeShmem(cfg.KeyDim, w), args...)
	return y
}

// gdnDecodeShmem is the decode kernels' dynamic shared memory for key dim
// dk and w warps a block.
func gdnDecodeShmem(dk, w int) int { return (2*dk+2*32*w)*4 + 2*w*8 }

// gdnDecodeArgs are the arguments the decode kernels (gdn_decode_cols_f32
// and its forms) share.
func gdnDecodeArgs(out, mt, bt2, at, alt, dtt *Tensor, p *StatePool, start, length, slot devptr, layer int, cfg kernels.GDNConfig, convDim int) []any {
	scale := 1 / float32(math.Sqrt(float64(cfg.KeyDim)))
	return []any{out.ptr, mt.ptr, bt2.ptr, at.ptr, alt.ptr, dtt.ptr, p.rec, start, length, slot,
		cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim, convDim, p.slots, layer, scale}
}
