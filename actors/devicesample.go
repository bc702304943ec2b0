package actors

import (
	"cohort/kernels"
	"cohort/model/sample"
)

// deviceRows describes the step's output rows for a DeviceSampler's
// Sample, or reports false when one of them must be sampled on the host: a
// constrained row (its grammar's mask stays on the host) or one that asks
// for more alternatives than the device reports.
func deviceRows(draws []drawRow, vocab int) ([]kernels.SampleRow, bool) {
	rows := make([]kernels.SampleRow, len(draws))
	for i := range draws {
		o := &draws[i]
		if o.Mask != nil || o.sampling.TopN > kernels.MaxSampleTopN {
			return nil, false
		}
		rows[i] = o.sampleRow(vocab)
	}
	return rows, true
}

// sampleRow is the row's draw as a DeviceSampler takes it: what pick does
// on the host, with the penalties, the logit bias and the stop-token bans
// of the request's index-th draw as sparse adjustments and its uniform
// drawn here.
func (o *drawRow) sampleRow(vocab int) kernels.SampleRow {
	sm := o.sampling
	if o.Score {
		return kernels.SampleRow{Score: true, Target: o.Target, TopN: sm.TopN}
	}
	p := sm.Params
	row := kernels.SampleRow{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP,
		Logprobs: sm.Logprobs, TopN: sm.TopN, Adjust: logitAdjusts(sample.Adjustments(p, o.index, o.history, vocab))}
	if p.Temperature > 0 {
		row.U = p.Uniform(o.index)
	}
	return row
}

// adjustOps maps each of model/sample's adjustment operations to the
// kernels' one.
var adjustOps = [...]struct {
	from sample.AdjustOps
	to   kernels.AdjustOps
}{
	{sample.AdjustRepeat, kernels.AdjustRepeat},
	{sample.AdjustPenalize, kernels.AdjustPenalize},
	{sample.AdjustBias, kernels.AdjustBias},
	{sample.AdjustBan, kernels.AdjustBan},
}

// logitAdjusts converts model/sample's adjustments to the kernels'.
func logitAdjusts(adj []sample.Adjustment) []kernels.LogitAdjust {
	if len(adj) == 0 {
		return nil
	}
	out := make([]kernels.LogitAdjust, len(adj))
	for i, a := range adj {
		var ops kernels.AdjustOps
		for _, m := range adjustOps {
			if a.Ops&m.from != 0 {
				ops |= m.to
			}
		}
		out[i] = kernels.LogitAdjust{ID: a.ID, Ops: ops, Scale: a.Scale, Subtract: a.Subtract, Bias: a.Bias}
	}
	return out
}

// hostResults converts a DeviceSampler's results to the sampler's.
func hostResults(res []kernels.SampleResult) []sample.Result {
	out := make([]sample.Result, len(res))
	for i, r := range res {
		out[i].Token = sample.TokenLogprob{ID: r.Token.ID, Logprob: r.Token.Logprob}
		if len(r.Top) > 0 {
			out[i].Top = make([]sample.TokenLogprob, len(r.Top))
			for j, t := range r.Top {
				out[i].Top[j] = sample.TokenLogprob{ID: t.ID, Logprob: t.Logprob}
			}
		}
	}
	return out
}
