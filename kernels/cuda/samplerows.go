package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"cohort/kernels"
)

// The layouts the sampling kernels (kernels/72_sample.cu) share with the
// host, in 32-bit words or bytes. This file has no build tag, so that the
// layouts are checked (and the rows described) without a GPU.
const (
	sampleArgsWords   = 16  // SampleRowArgs
	sampleAdjustWords = 5   // SampleAdjust
	samplePartBytes   = 32  // SamplePart
	sampleOutBytes    = 256 // SampleOut
	sampleTopN        = 20  // SAMPLE_TOPN
)

// The sampling kernels' launch shapes: the blocks of sample_prep and
// sample_exp per row (fewer only for a vocabulary smaller than that), their
// threads, and sample_rows' block, whose
// per-thread radix histograms (16 bins of a float64 mass and an int count
// per thread) fill its dynamic shared memory.
const (
	sampleMaxBlocks   = 32
	samplePrepThreads = 256
	sampleThreads     = 512
	sampleSmem        = 16 * sampleThreads * (8 + 4)
)

// SampleRowArgs.flags and SampleAdjust.ops.
const (
	sampleGreedy  = 1
	sampleScore   = 2
	sampleLogprob = 4

	sampleRepeat   = 1
	samplePenalize = 2
	sampleBias     = 4
	sampleBan      = 8
)

// sampleAdjustOps maps the kernels' adjustment operations to the device's.
var sampleAdjustOps = [...]struct {
	op  kernels.AdjustOps
	dev int32
}{
	{kernels.AdjustRepeat, sampleRepeat},
	{kernels.AdjustPenalize, samplePenalize},
	{kernels.AdjustBias, sampleBias},
	{kernels.AdjustBan, sampleBan},
}

// sampleArgs is what the sampling kernels read of a call: per row its
// SampleRowArgs, the rows' adjustments one after another, and how many
// rows need a float64 work row (their pslot).
type sampleArgs struct {
	rows   []int32
	adjust []int32
	pslots int
}

// wantsLogprob reports whether a row's result carries a logprob.
func wantsLogprob(r kernels.SampleRow) bool { return r.Score || r.Logprobs || r.TopN > 0 }

// encodeSampleRows describes rows of vocab logits for the kernels. It
// panics (naming op) on a row that breaks kernels.SampleRow's contract: too
// many alternatives, a scored target or an adjustment outside the
// vocabulary, adjustments not ascending.
func encodeSampleRows(op string, rows []kernels.SampleRow, vocab int) sampleArgs {
	a := sampleArgs{rows: make([]int32, 0, len(rows)*sampleArgsWords)}
	f64 := func(v float64) {
		a.rows = append(a.rows, int32(uint32(math.Float64bits(v))), int32(math.Float64bits(v)>>32))
	}
	for r, row := range rows {
		if row.TopN < 0 || row.TopN > kernels.MaxSampleTopN {
			panic(fmt.Sprintf("cuda: %s: row %d asks for %d alternatives (at most %d)", op, r, row.TopN, kernels.MaxSampleTopN))
		}
		if row.Score && (row.Target < 0 || int(row.Target) >= vocab) {
			panic(fmt.Sprintf("cuda: %s: row %d scores token %d of a vocabulary of %d", op, r, row.Target, vocab))
		}
		var flags int32
		switch {
		case row.Score:
			flags = sampleScore
		case row.Temperature <= 0:
			flags = sampleGreedy
		}
		if wantsLogprob(row) {
			flags |= sampleLogprob
		}
		pslot := int32(-1)
		if !row.Score && (row.Temperature > 0 || len(row.Adjust) > 0) {
			pslot = int32(a.pslots)
			a.pslots++
		}
		start := len(a.adjust) / sampleAdjustWords
		if !row.Score {
			a.adjust = appendAdjusts(op, a.adjust, r, row.Adjust, vocab)
		}
		f64(row.Temperature)
		f64(row.TopP)
		f64(row.MinP)
		f64(row.U)
		topK := min(max(row.TopK, 0), vocab) // vocab or more: no cut
		a.rows = append(a.rows, int32(topK), int32(row.TopN), flags, row.Target,
			int32(start), int32(len(a.adjust)/sampleAdjustWords-start), pslot, 0)
	}
	return a
}

// appendAdjusts appends row r's adjustments as SampleAdjusts.
func appendAdjusts(op string, out []int32, r int, adj []kernels.LogitAdjust, vocab int) []int32 {
	for i, j := range adj {
		if j.ID < 0 || int(j.ID) >= vocab || (i > 0 && j.ID <= adj[i-1].ID) {
			panic(fmt.Sprintf("cuda: %s: row %d: adjustment %d of token %d (vocabulary %d; ids must ascend)", op, r, i, j.ID, vocab))
		}
		var ops int32
		for _, m := range sampleAdjustOps {
			if j.Ops&m.op != 0 {
				ops |= m.dev
			}
		}
		out = append(out, j.ID, ops, int32(math.Float32bits(j.Scale)), int32(math.Float32bits(j.Subtract)), int32(math.Float32bits(j.Bias)))
	}
	return out
}

// decodeSampleOuts reads the rows' SampleOuts: the token, and its logprob
// and alternatives where the row asked for them.
func decodeSampleOuts(raw []byte, rows []kernels.SampleRow) []kernels.SampleResult {
	le := binary.LittleEndian
	out := make([]kernels.SampleResult, len(rows))
	for r, row := range rows {
		o := raw[r*sampleOutBytes : (r+1)*sampleOutBytes]
		out[r].Token.ID = int32(le.Uint32(o[0:]))
		if !wantsLogprob(row) {
			continue
		}
		out[r].Token.Logprob = math.Float64frombits(le.Uint64(o[8:]))
		n := int(int32(le.Uint32(o[4:])))
		if row.TopN == 0 || n <= 0 {
			continue
		}
		out[r].Top = make([]kernels.TokenLogprob, min(n, sampleTopN))
		for t := range out[r].Top {
			out[r].Top[t] = kernels.TokenLogprob{ID: int32(le.Uint32(o[16+4*t:])), Logprob: math.Float64frombits(le.Uint64(o[96+8*t:]))}
		}
	}
	return out
}
