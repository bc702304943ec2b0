//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"os"
	"unsafe"

	"cohort/kernels"
)

// StatePool holds the GDN state of one rank in device memory: per layer and
// slot, the conv state [K-1, convDim] (raw input rows, oldest first) and the
// recurrent state [valueHeads, keyDim, valueDim] (as in the CPU oracle),
// float32, or bf16 with COHORT_CUDA_GDN_STATE=bf16 (gdn_state.go).
type StatePool struct {
	b             *Backend
	layers, slots int // slots: all of them, the pad slot included (stride of the layout)
	visible       int // the slots requests may take (Slots); a pad slot follows them when slots > visible
	cfg           kernels.GDNConfig
	bf16          bool   // the recurrent state is stored as bf16 (gdnStateBF16 when made)
	conv, rec     devptr // [layer][slot][K-1][convDim] float32, [layer][slot][vHeads][dk][dv] float32 or bf16
	snaps         devptr // snapshot places, places of them (snapshots.go)
	places        int
}

var _ kernels.StatePool = (*StatePool)(nil)

// convMaxKernel is the largest conv kernel the conv kernel supports.
const convMaxKernel = 8

// gdnStateBF16 is COHORT_CUDA_GDN_STATE=bf16: new state pools store the
// recurrent state as bf16 (gdn_state.go). A variable so that tests can make
// pools of either kind in process; a pool keeps the kind it was made with.
var gdnStateBF16 = func() bool {
	bf16, err := gdnStateFromEnv(os.Getenv("COHORT_CUDA_GDN_STATE"))
	if err != nil {
		panic("cuda: " + err.Error())
	}
	return bf16
}()

// NewStatePool allocates zeroed GDN state (a permanent allocation).
func (b *Backend) NewStatePool(layers, slots int, cfg kernels.GDNConfig) kernels.StatePool {
	const op = "NewStatePool"
	check(op, kernels.CheckStateConfig(cfg))
	if cfg.ConvKernel > convMaxKernel {
		panic(fmt.Sprintf("cuda: NewStatePool: conv kernel %d, at most %d", cfg.ConvKernel, convMaxKernel))
	}
	p := &StatePool{b: b, layers: layers, slots: slots + b.padPlaces(), visible: slots, cfg: cfg, bf16: gdnStateBF16}
	check(op, gdnStateCheck(p.recSize(), p.bf16))
	nConv := int64(layers) * int64(p.slots) * p.convSize()
	nRec := int64(layers) * int64(p.slots) * p.recSize()
	p.conv, p.rec = b.allocPermanent(op, nConv*4), b.allocPermanent(op, nRec*p.recElem())
	if err := memsetD32(p.conv, 0, nConv); err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
	if err := memsetD32(p.rec, 0, nRec*p.recElem()/4); err != nil { // zero bits: 0.0 in either type
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
	return p
}

// Slots returns the number of slots requests may take.
func (p *StatePool) Slots() int { return p.visible }

// PadSlot returns the slot of pad rows (kernels.PadSlotter), -1 without one.
func (p *StatePool) PadSlot() int {
	if p.slots > p.visible {
		return p.visible
	}
	return -1
}

func (p *StatePool) convSize() int64 { return int64(p.cfg.ConvKernel-1) * int64(p.cfg.ConvDim()) }
func (p *StatePool) recSize() int64 {
	return int64(p.cfg.ValueHeads) * int64(p.cfg.KeyDim) * int64(p.cfg.ValueDim)
}

// recElem is the bytes of a recurrent state element (4, or 2 for bf16).
func (p *StatePool) recElem() int64 { return gdnStateElem(p.bf16) }

// convAt and recAt are the conv and recurrent state of (layer, slot)
// number i = layer·slots + slot.
func (p *StatePool) convAt(i int64) devptr { return p.conv + devptr(i*p.convSize()*4) }
func (p *StatePool) recAt(i int64) devptr  { return p.rec + devptr(i*p.recSize()*p.recElem()) }

// kernel is the entry of GDN kernel name (an f32-state entry that reads or
// writes the recurrent state) for the pool's state type.
func (p *StatePool) kernel(name string) string { return gdnStateKernel(name, p.bf16) }

func (p *StatePool) check(layer, slot int) {
	check("StatePool", kernels.CheckSlot(layer, slot, p.layers, p.visible))
}

// checkSeq checks a batch sequence's slot: one of the requests', or the pad
// slot for a pad row.
func (p *StatePool) checkSeq(layer int, s kernels.Seq) {
	if s.Pad && s.Slot == p.PadSlot() {
		check("StatePool", kernels.CheckSlot(layer, s.Slot, p.layers, p.slots))
		return
	}
	p.check(layer, s.Slot)
}

// Reset zeroes a slot's conv and recurrent state in every layer. It runs on
// the device (the caller's thread must have the backend's context, as for
// every op).
func (p *StatePool) Reset(slot int) {
	for l := range p.layers {
		p.check(l, slot)
		i := int64(l*p.slots + slot)
		if err := memsetD32(p.convAt(i), 0, p.convSize()); err != nil {
			panic(fmt.Sprintf("cuda: StatePool.Reset(%d): %v", slot, err))
		}
		// recSize·recElem is a multiple of 4 (gdnStateCheck).
		if err := memsetD32(p.recAt(i), 0, p.recSize()*p.recElem()/4); err != nil {
			panic(fmt.Sprintf("cuda: StatePool.Reset(%d): %v", slot, err))
		}
	}
}

// Snapshot returns a copy of all state of a slot: for every layer in order,
// its conv state followed by its recurrent state (the CPU oracle's format,
// float32; a bf16 recurrent state widened exactly).
func (p *StatePool) Snapshot(slot int) []float32 {
	out := make([]float32, 0, int64(p.layers)*(p.convSize()+p.recSize()))
	for l := range p.layers {
		p.check(l, slot)
		i := int64(l*p.slots + slot)
		out = append(out, p.download(p.convAt(i), p.convSize())...)
		if p.bf16 {
			out = append(out, widenBF16(p.downloadBits(p.recAt(i), p.recSize()))...)
		} else {
			out = append(out, p.download(p.recAt(i), p.recSize())...)
		}
	}
	return out
}

// SetSlot overwrites all state of a slot from a Snapshot-formatted slice (a
// bf16 recurrent state takes the values rounded to nearest even).
func (p *StatePool) SetSlot(slot int, state []float32) {
	if int64(len(state)) != int64(p.layers)*(p.convSize()+p.recSize()) {
		panic(fmt.Sprintf("cuda: StatePool.SetSlot: %d values, want %d", len(state), int64(p.layers)*(p.convSize()+p.recSize())))
	}
	off := int64(0)
	for l := range p.layers {
		p.check(l, slot)
		i := int64(l*p.slots + slot)
		for k, part := range []struct {
			base devptr
			n    int64
		}{{p.convAt(i), p.convSize()}, {p.recAt(i), p.recSize()}} {
			if part.n > 0 {
				var err error
				if k == 1 && p.bf16 {
					bits := make([]uint16, part.n)
					for j, v := range state[off : off+part.n] {
						bits[j] = bf16Bits(v)
					}
					err = memcpyHtoD(part.base, unsafe.Pointer(&bits[0]), part.n*2)
				} else {
					err = memcpyHtoD(part.base, unsafe.Pointer(&state[off]), part.n*4)
				}
				if err != nil {
					panic(fmt.Sprintf("cuda: StatePool.SetSlot: %v", err))
				}
			}
			off += part.n
		}
	}
}

func (p *StatePool) download(src devptr, n int64) []float32 {
	out := make([]float32, n)
	if n > 0 {
		if err := memcpyDtoH(unsafe.Pointer(&out[0]), src, n*4); err != nil {
			panic(fmt.Sprintf("cuda: StatePool: %v", err))
		}
	}
	return out
}

// downloadBits copies n bf16 values from src.
func (p *StatePool) downloadBits(src devptr, n int64) []uint16 {
	out := make([]uint16, n)
	if n > 0 {
		if err := memcpyDtoH(unsafe.Pointer(&out[0]), src, n*2); err != nil {
			panic(fmt.Sprintf("cuda: StatePool: %v", err))
		}
	}
	return out
}

func asStatePool(op string, s kernels.StatePool) *StatePool {
	p, ok := s.(*StatePool)
	if !ok || p == nil {
		panic(fmt.Sprintf("cuda: %s: state pool %T is not a *cuda.StatePool", op, s))
	}
	return p
}

// seqMeta uploads the sequences' starts, lengths and slots.
func (b *Backend) seqMeta(op string, p *StatePool, layer int, bt *kernels.Batch) (start, length, slot devptr) {
	st, ln, sl := seqLayout(p, layer, bt)
	key := func(kind string) metaKey { return metaKey{kind: kind, src: unsafe.Pointer(bt)} }
	gen := func(part int) inputGen {
		return b.stepBatch(bt, func(in *kernels.StepInputs) []int32 {
			if part == 0 { // once per replay: what the op checks before it uploads
				check(op, kernels.CheckBatch(in.Batch, in.Batch.Rows(), true))
			}
			st, ln, sl := seqLayout(p, layer, in.Batch)
			return [3][]int32{st, ln, sl}[part]
		})
	}
	start = b.sharedMeta(key("seqStart"), func() devptr { return b.uploadInts(op, st, gen(0)) })
	length = b.sharedMeta(key("seqLen"), func() devptr { return b.uploadInts(op, ln, gen(1)) })
	slot = b.sharedMeta(key("seqSlot"), func() devptr { return b.uploadInts(op, sl, gen(2)) })
	return start, length, slot
}

// allDecode reports whether every sequence of the batch brings one token.
func allDecode(bt *kernels.Batch) bool {
	for _, s := range bt.Seqs {
		if s.Len != 1 {
			return false
		}
	}
	return len(bt.Seqs) > 0
}

// restDecode reports whether every sequence of the batch that the
// recurrent kernels run (outside deterministic mode: those the chunked form
// leaves) brings one token: a decode batch, or the decode rows of a mixed
// step, which then take the decode-row kernels (gdnMixedPipe).
func restDecode(bt *kernels.Batch, cfg kernels.GDNConfig) bool {
	if !gdnMixedPipe {
		return allDecode(bt)
	}
	n := 0
	for _, s := range bt.Seqs {
		if gdnChunked(s.Len, cfg) {
			continue
		}
		if s.Len != 1 {
			return false
		}
		n++
	}
	return n > 0
}

// gdnMixedPipe sends the decode rows of a mixed step (beside chunked
// prefills) to the decode-row kernels, as a decode batch's
// (COHORT_CUDA_GDN_MIXED_PIPE=0: the 16-warp recurrent kernel, as before).
var gdnMixedPipe = os.Getenv("COHORT_CUDA_GDN_MIXED_PIPE") != "0"

// seqLayout returns the sequences' starts, lengths and slots, checking each
// slot against the pool.
func seqLayout(p *StatePool, layer int, bt *kernels.Batch) (st, ln, sl []int32) {
	n := len(bt.Seqs)
	st, ln, sl = make([]int32, n), make([]int32, n), make([]int32, n)
	for i, s := range bt.Seqs {
		p.checkSeq(layer, s)
		st[i], ln[i], sl[i] = int32(s.Start), int32(s.Len), int32(s.Slot)
	}
	return st, ln, sl
}

// CausalConv1d applies the depthwise causal conv (weight [convDim, (1,) K])
// and SiLU to x [T, convDim], continuing each sequence from its conv state
// and saving the last K−1 raw input rows back into it.
func (b *Backend) CausalConv1d(x, w kernels.Tensor, states kernels.StatePool, layer int, bt *kernels.Batch) kernels.Tensor {
	const op = "CausalConv1d"
	xt, wt := b.tensor(op, x), b.tensor(op, w)
	p := asStatePool(op, states)
	check(op, kernels.CheckConv1d(xt.shape, wt.shape, p.cfg))
	T, convDim := xt.dims()
	K := p.cfg.ConvKernel
	check(op, kernels.CheckBatch(bt, T, true))
	y := b.newTensor(op, T, convDim)
	if len(bt.Seqs) == 0 || convDim == 0 {
		return y
	}
	start, length, slot := b.seqMeta(op, p, layer, bt)
	if name, grid, block, flat, ok := convTiles(bt, convDim, K, y.ptr, xt.ptr, wt.ptr, p.conv); ok {
		if name == "conv1d_tile8_f32" && convPipe {
			grid, flat, run := b.convPipeLaunch(bt, convDim, K)
			b.launch(op, convPipeKernel, grid, block, 0,
				y.ptr, xt.ptr, wt.ptr, p.conv, start, length, slot, convDim, K, p.slots, layer, len(bt.Seqs), flat, run)
			return y
		}
		b.launch(op, name, grid, block, 0,
			y.ptr, xt.ptr, wt.ptr, p.conv, start, length, slot, convDim, K, p.slots, layer, len(bt.Seqs), flat)
		return y
	}
	lanes := convLanes(bt)
	channels := max(256/lanes, 32)
	b.launch(op, "conv1d_f32", [3]int{(convDim + channels - 1) / channels, len(bt.Seqs), 1}, [3]int{channels, lanes, 1}, 0,
		y.ptr, xt.ptr, wt.ptr, p.conv, start, length, slot, convDim, K, p.slots, layer)
	return y
}

// gdnDecodeKernel returns the fused decode kernel (norms, gates and the
// recurrence in one launch) for bt and its warps a block, or "" when bt
// takes the separate kernels. gdn_decode_cols_f32 (16 warps for dk 128)
// runs when its grid fits one wave: its blocks hold twice the registers,
// and measured on the H200 it saved 87 µs a step at batch 1 but made batch
// 8 and 32 slower (5.85 against 5.39 ms/token, 10.0 against 8.1). With
// COHORT_CUDA_GDN_WIDE=fused, larger decode batches take
// gdn_decode_cols_wide_f32 (4 warps, 32 rows a thread); by default they
// take the separate norms and gates and gdn_recurrent_cols_wide_f32, which
// measured faster at batch 128 (14.16 against 15.50 ms/token, in two runs
// that also differed in the bf16 twins) and level at 256 (22.68, 22.44).
func (b *Backend) gdnDecodeKernel(bt *kernels.Batch, cfg kernels.GDNConfig, warps int) (string, int) {
	dk, dv := cfg.KeyDim, cfg.ValueDim
	if !b.fuse || b.det || !allDecode(bt) {
		return "", 0
	}
	if warps <= 16 && (dk+warps-1)/warps <= gdnRowsMax && len(bt.Seqs)*cfg.ValueHeads*((dv+31)/32) <= b.sms {
		return "gdn_decode_cols_f32", warps
	}
	if w := (dk + gdnRowsWide - 1) / gdnRowsWide; gdnWide && gdnWideFused && w <= 4 {
		return "gdn_decode_cols_wide_f32", w
	}
	return "", 0
}

// convTile is CONV_TILE of kernels/50_gdn.cu: the tokens a thread of
// conv1d_tile8_f32 runs.
const convTile = 8

// convTiled sends the conv to the tiled kernels (COHORT_CUDA_CONV=lanes:
// conv1d_f32 with token lanes, the kernel before them, for A/B runs).
var convTiled = os.Getenv("COHORT_CUDA_CONV") != "lanes"

// convPipe sends the batches that would take conv1d_tile8_f32 (some
// sequence longer than one token) to conv1d_pipe_f32 instead, the default;
// COHORT_CUDA_CONV=tile8 keeps conv1d_tile8_f32 (A/B runs; both give the
// same bits). conv1d_tile8_f32 measured 55 µs a launch (1.1 TB/s) on the
// H200 for a 1,024-token prefill of the 4b shape: 2,064 blocks in 3.1
// waves of 5 blocks an SM (94 registers), every block loading its inputs,
// then running the float64 exps of its SiLUs, then storing, so that within
// a wave the memory traffic and the float64 work hardly overlap.
// conv1d_pipe_f32 streams a run of tokens per thread with the next group's
// loads in flight during the current group's SiLUs, and convPipeLaunch
// sizes the runs so that the grid is one wave.
var convPipe = os.Getenv("COHORT_CUDA_CONV") != "tile8"

// convPipeKernel is the streamed conv (kernels/50_gdn.cu).
const convPipeKernel = "conv1d_pipe_f32"

// convPipeRun, when positive, forces the run length of conv1d_pipe_f32
// (tests: runs of a few tokens, many per sequence).
var convPipeRun = 0

// convPipeLaunch returns the grid of conv1d_pipe_f32 for bt (blocks of 128
// threads, a thread 4 channels), its flat flag and its run: the run is the
// shortest (at least K-1) with which every sequence's runs, for every
// group of 512 channels, fit the resident blocks of one wave (nSeq + T/run
// blocks in x, a few idle); flat = 0 (block x is sequence x) when the
// longest sequence fits one run.
func (b *Backend) convPipeLaunch(bt *kernels.Batch, convDim, K int) (grid [3]int, flat, run int) {
	longest, T, nSeq := 0, 0, len(bt.Seqs)
	for _, s := range bt.Seqs {
		longest, T = max(longest, s.Len), T+s.Len
	}
	groups := (convDim/4 + 127) / 128
	run = 2 * convTile
	if free := b.occupancy(convPipeKernel, 128)*max(b.sms, 1)/groups - nSeq; free > 0 {
		run = (T + free - 1) / free
	}
	if convPipeRun > 0 {
		run = convPipeRun
	}
	run = max(run, K-1, 1)
	if longest <= run {
		return [3]int{nSeq, groups, 1}, 0, run
	}
	return [3]int{nSeq + (T+run-1)/run, groups, 1}, 1, run
}

// convTiles returns the launch of the tiled conv kernels for bt, or ok =
// false where conv1d_f32 must run (COHORT_CUDA_CONV=lanes, K outside 2..4,
// convDim not a multiple of 4 or a pointer not 16-byte aligned). A thread
// runs 4 channels (float4 loads and stores) of a tile of tokens of one
// sequence: one token (conv1d_tile1_f32) when no sequence has more, else
// convTile. Measured with ncu on the H200 (4b-shape, one 1024-token
// sequence), conv1d_f32 took 133 µs a launch at 484 GB/s: 256 blocks of
// 32 channels × 32 token lanes, each thread walking 32 tokens with 4 loads
// each, little in flight. The tiles load every input once (and K-1 more
// for the halo, from L2) with 11 loads in flight a thread. Batches whose
// sequences all fit one tile (decode rows) map block x to sequence x
// (flat = 0: the CUDA-graph decode steps); longer ones take the flat tile
// numbering of conv1d_tiles (nSeq + ceil(T/convTile) blocks in x, a few of
// them idle).
func convTiles(bt *kernels.Batch, convDim, K int, ptrs ...devptr) (name string, grid, block [3]int, flat int, ok bool) {
	if !convTiled || K < 2 || K > 4 || convDim%4 != 0 || !aligned16(ptrs...) {
		return "", grid, block, 0, false
	}
	longest, T := 0, 0
	for _, s := range bt.Seqs {
		longest, T = max(longest, s.Len), T+s.Len
	}
	quads := convDim / 4
	switch {
	case longest <= 1:
		return "conv1d_tile1_f32", [3]int{len(bt.Seqs), (quads + 63) / 64, 1}, [3]int{64, 1, 1}, 0, true
	case longest <= convTile:
		return "conv1d_tile8_f32", [3]int{len(bt.Seqs), (quads + 127) / 128, 1}, [3]int{128, 1, 1}, 0, true
	}
	return "conv1d_tile8_f32", [3]int{len(bt.Seqs) + (T+convTile-1)/convTile, (quads + 127) / 128, 1}, [3]int{128, 1, 1}, 1, true
}

// convLanes is the token lanes of a conv1d_f32 block (the rest of its
// threads are channels: 256 threads up to 8 lanes, then 32 channels): as
// many as the longest sequence has tokens, so that decode rows (one token
// each) leave no lane idle; up to 8, or 32 for a batch of at most
// convWideSeqs sequences, where a long prefill must fill the device alone
// (measured on the H200, 4b-shape: 8 lanes took 3.19 ms of a 1024-token
// prefill step's 34.1 ms of kernels, 256 blocks of 8 warps for 8192
// channels, each thread walking 128 tokens; 32 lanes made the 1k TTFT
// median 33.4 ms against 34.4). A mixed batch keeps 8, since every
// sequence gets blocks of that many lanes and decode rows use one.
func convLanes(bt *kernels.Batch) int {
	longest := 0
	for _, s := range bt.Seqs {
		longest = max(longest, s.Len)
	}
	most := 8
	if len(bt.Seqs) <= convWideSeqs {
		most = 32
	}
	lanes := 1
	for lanes < most && lanes < longest {
		lanes *= 2
	}
	return lanes
}

// convWideSeqs is the most sequences a batch may have for conv1d_f32 to
// take 32 token lanes.
const convWideSeqs = 2

// deltaRuleOperands are a gated delta rule's operands, checked: the conv
// output mixed [T, convDim], beta and a, the heads' aLog and dtBias, and
// the state pool.
type deltaRuleOperands struct {
	mixed, beta, a, aLog, dtBias *Tensor
	p                            *StatePool
	T, convDim                   int
}

func (b *Backend) deltaRuleOperands(op string, mixed, beta, a, aLog, dtBias kernels.Tensor, states kernels.StatePool,
	bt *kernels.Batch, cfg kernels.GDNConfig) deltaRuleOperands {
	d := deltaRuleOperands{mixed: b.tensor(op, mixed), beta: b.tensor(op, beta), a: b.tensor(op, a),
		aLog: b.tensor(op, aLog), dtBias: b.tensor(op, dtBias), p: asStatePool(op, states)}
	check(op, kernels.CheckDeltaRule(d.mixed.shape, d.beta.shape, d.a.shape, d.aLog.shape, d.dtBias.shape, cfg, d.p.cfg))
	d.T, d.convDim = d.mixed.dims()
	check(op, kernels.CheckBatch(bt, d.T, true))
	return d
}

// gdnWarps is the warps a block of the column-split recurrent kernels for
// key dim dk.
func gdnWarps(dk int) int { return min(max((dk+7)/8, 1), 32) }

// GatedDeltaRule runs the gated delta rule on mixed [T, convDim] = [q | k | v]
// with beta and a [T, valueHeads] (raw), continuing each sequence from its
// recurrent state and storing the final state. Sequences of more than
// gdnChunkMin tokens take the chunked form (gdn_chunk.go), the others the
// exact recurrent form; in deterministic mode every sequence takes the
// recurrent column-split kernel after the separate norms and gates. Output
// [T, valueHeads·dv].
func (b *Backend) GatedDeltaRule(mixed, beta, a, aLog, dtBias kernels.Tensor, states kernels.StatePool, layer int, bt *kernels.Batch, cfg kernels.GDNConfig) kernels.Tensor {
	const op = "GatedDeltaRule"
	d := b.deltaRuleOperands(op, mixed, beta, a, aLog, dtBias, states, bt, cfg)
	mt, bt2, at, alt, dtt, p, T, convDim := d.mixed, d.beta, d.a, d.aLog, d.dtBias, d.p, d.T, d.convDim
	nk, nv, dk, dv := cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim
	out := b.newTensor(op, T, nv*dv)
	if T == 0 || len(bt.Seqs) == 0 {
		return out
	}
	scale := 1 / float32(math.Sqrt(float64(dk)))
	warps := gdnWarps(dk)
	if name, w := b.gdnDecodeKernel(bt, cfg, warps); name != "" {
		// Decode rows: the q/k norms and the gates are computed by the
		// recurrent kernel itself (two launches fewer per layer).
		start, length, slot := b.seqMeta(op, p, layer, bt)
		b.launch(op, p.kernel(name), [3]int{len(bt.Seqs), nv, (dv + 31) / 32}, [3]int{32, w, 1},
			gdnDecodeShmem(dk, w), gdnDecodeArgs(out, d, start, length, slot, layer, cfg)...)
		return out
	}
	qk := nk * dk
	qh, kh := b.newTensor(op, T, qk), b.newTensor(op, T, qk)
	g, bs := b.newTensor(op, T, nv), b.newTensor(op, T, nv)
	if dk <= 256 && convDim%4 == 0 && b.useRowNorm(T, dk, qh.ptr, kh.ptr, mt.ptr) {
		grid, block := b.normRowsGrid(T * 2 * nk)
		b.launch(op, "gdn_qk_norm_rows_f32", grid, block, 0,
			qh.ptr, kh.ptr, mt.ptr, convDim, nk, dk, scale, T)
	} else {
		b.launch(op, "gdn_qk_norm_f32", [3]int{T, 2 * nk, 1}, [3]int{blockFor(dk), 1, 1}, 0,
			qh.ptr, kh.ptr, mt.ptr, convDim, nk, dk, scale)
	}
	n := int64(T) * int64(nv)
	b.launch(op, "gdn_gates_f32", [3]int{b.grid1(n, 256), 1, 1}, [3]int{256, 1, 1}, 0,
		g.ptr, bs.ptr, bt2.ptr, at.ptr, alt.ptr, dtt.ptr, n, nv)
	start, length, slot := b.seqMeta(op, p, layer, bt)
	nSeq := len(bt.Seqs)
	if !b.det && gdnAnyChunked(bt, cfg) {
		start, length, slot, nSeq = b.gatedDeltaChunked(op, out, qh, kh, mt, g, bs, p, layer, bt, cfg)
		if nSeq == 0 {
			return out
		}
	}
	name, rows := "gdn_recurrent_cols_f32", gdnRowsMax
	if w := (dk + gdnRowsWide - 1) / gdnRowsWide; gdnWide && !b.det && restDecode(bt, cfg) && w <= 4 {
		// Decode rows: a quarter of the warps, 32 rows a thread. Measured
		// on the H200 at batch 128 the 16-warp form moved the state at
		// 1.4 TB/s (9.1 of a 17.2 ms step).
		name, warps, rows = "gdn_recurrent_cols_wide_f32", w, gdnRowsWide
		if gdnWidePipe && dk == gdnRowsWide*gdnPipeWarps && dv%32 == 0 {
			// The same blocks, each running a share of the (sequence,
			// head, column chunk) items with the next one's loads in flight.
			b.launch(op, p.kernel("gdn_recurrent_cols_pipe_f32"), [3]int{b.gdnPipeBlocks(p.kernel("gdn_recurrent_cols_pipe_f32"), nSeq*nv*(dv/32)), 1, 1}, [3]int{32, gdnPipeWarps, 1},
				(2*dk+2*32*gdnPipeWarps)*4,
				out.ptr, qh.ptr, kh.ptr, mt.ptr, g.ptr, bs.ptr, p.rec, start, length, slot,
				nk, nv, dk, dv, convDim, p.slots, layer, nSeq)
			return out
		}
	}
	if p.bf16 && name == "gdn_recurrent_cols_f32" {
		// gdn_recurrent_cols_f32_sbf16's launch bounds are 512 threads
		// (1024 spilled): dk up to 256 in registers, larger dk takes
		// gdn_recurrent_f32_sbf16.
		warps = min(warps, 16)
	}
	if (dk+warps-1)/warps <= rows {
		// Column-split form: 32 state columns per block, dk rows over the
		// block's warps (at most rows a thread, kept in registers).
		b.launch(op, p.kernel(name), [3]int{nSeq, nv, (dv + 31) / 32}, [3]int{32, warps, 1},
			(2*dk+2*32*warps)*4,
			out.ptr, qh.ptr, kh.ptr, mt.ptr, g.ptr, bs.ptr, p.rec, start, length, slot,
			nk, nv, dk, dv, convDim, p.slots, layer)
		return out
	}
	block := min(max((dv+31)/32*32, 32), 256)
	b.launch(op, p.kernel("gdn_recurrent_f32"), [3]int{nSeq, nv, 1}, [3]int{block, 1, 1}, 2*dk*4,
		out.ptr, qh.ptr, kh.ptr, mt.ptr, g.ptr, bs.ptr, p.rec, start, length, slot,
		nk, nv, dk, dv, convDim, p.slots, layer)
	return out
}

// gdnRowsMax is GDN_ROWS_MAX of kernels/50_gdn.cu: the most state rows one
// thread of gdn_recurrent_cols_f32 holds; gdnRowsWide is GDN_ROWS_WIDE, for
// gdn_recurrent_cols_wide_f32.
const (
	gdnRowsMax  = 16
	gdnRowsWide = 32
)

// gdnWide sends decode batches to the wide kernels, gdnWideFused to the
// fused one, gdnWidePipe to the pipelined one where it applies
// (COHORT_CUDA_GDN_WIDE=0: none, the 16-warp kernels; "fused":
// gdn_decode_cols_wide_f32; "nopipe": gdn_recurrent_cols_wide_f32 after
// separate norms and gates, the default before the pipelined kernel;
// default: gdn_recurrent_cols_pipe_f32 after separate norms and gates for
// dk = 128 and dv a multiple of 32, else gdn_recurrent_cols_wide_f32).
var (
	gdnWide      = os.Getenv("COHORT_CUDA_GDN_WIDE") != "0"
	gdnWideFused = os.Getenv("COHORT_CUDA_GDN_WIDE") == "fused"
	gdnWidePipe  = os.Getenv("COHORT_CUDA_GDN_WIDE") != "nopipe"
)

// gdnPipeWarps is GDN_PIPE_WARPS of kernels/50_gdn.cu: the warps of a
// gdn_recurrent_cols_pipe_f32 block (so dk = 128).
const gdnPipeWarps = 4

// gdnPipeBlocks returns the grid of gdn_recurrent_cols_pipe_f32 (or its
// bf16-state twin, name) for items work items: one wave of resident blocks (every item its own block when
// they fit), so that every SM holds as many blocks as it can (the kernel's
// launch bounds ask for 4: 16 warps of 128 registers, 64 KiB of state
// loads in flight an SM) and each block runs ceil or floor of
// items/blocks of them.
func (b *Backend) gdnPipeBlocks(name string, items int) int {
	return min(items, b.occupancy(name, 32*gdnPipeWarps)*max(b.sms, 1))
}
