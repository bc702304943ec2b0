package remote

// Conversions between the engine's rank messages and their protobuf form
// (rankpb), for ranks in other processes.

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"cohort/actors"
	"cohort/actors/planner"
	"cohort/actors/remote/rankpb"
	"cohort/model"
	"cohort/model/sample"
	"cohort/nccl"
)

// traceContext is the W3C propagator that carries a step's span context
// across processes (traceparent and tracestate).
var traceContext = propagation.TraceContext{}

func traceToPB(sc trace.SpanContext) *rankpb.Trace {
	if !sc.IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return &rankpb.Trace{Traceparent: carrier["traceparent"], Tracestate: carrier["tracestate"]}
}

func traceFromPB(t *rankpb.Trace) trace.SpanContext {
	if t == nil || t.Traceparent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{"traceparent": t.Traceparent, "tracestate": t.Tracestate}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), carrier))
}

func capacityInputToPB(c model.CapacityInput) *rankpb.CapacityInput {
	return &rankpb.CapacityInput{Budget: c.Budget, Reserve: c.Reserve, Scratch: c.Scratch, ElemBytes: int32(c.ElemBytes),
		PageSize: int32(c.PageSize), MaxSeqs: int32(c.MaxSeqs), MaxModelLen: int32(c.MaxModelLen)}
}

func capacityInputFromPB(c *rankpb.CapacityInput) model.CapacityInput {
	return model.CapacityInput{Budget: c.GetBudget(), Reserve: c.GetReserve(), Scratch: c.GetScratch(),
		ElemBytes: int(c.GetElemBytes()), PageSize: int(c.GetPageSize()), MaxSeqs: int(c.GetMaxSeqs()), MaxModelLen: int(c.GetMaxModelLen())}
}

func paramsToPB(p sample.Params) *rankpb.SampleParams {
	out := &rankpb.SampleParams{Temperature: p.Temperature, TopK: int32(p.TopK), TopP: p.TopP, MinP: p.MinP, Seed: p.Seed,
		PresencePenalty: p.PresencePenalty, FrequencyPenalty: p.FrequencyPenalty, RepetitionPenalty: p.RepetitionPenalty,
		MinTokens: int32(p.MinTokens), StopIds: p.StopIDs}
	for _, b := range p.LogitBias {
		out.LogitBias = append(out.LogitBias, &rankpb.TokenBias{Id: b.ID, Bias: b.Bias})
	}
	return out
}

func paramsFromPB(p *rankpb.SampleParams) sample.Params {
	out := sample.Params{Temperature: p.GetTemperature(), TopK: int(p.GetTopK()), TopP: p.GetTopP(), MinP: p.GetMinP(), Seed: p.GetSeed(),
		PresencePenalty: p.GetPresencePenalty(), FrequencyPenalty: p.GetFrequencyPenalty(), RepetitionPenalty: p.GetRepetitionPenalty(),
		MinTokens: int(p.GetMinTokens()), StopIDs: p.GetStopIds()}
	for _, b := range p.GetLogitBias() {
		out.LogitBias = append(out.LogitBias, sample.TokenBias{ID: b.GetId(), Bias: b.GetBias()})
	}
	return out
}

func stepToPB(s *actors.RunStep) *rankpb.RunStep {
	out := &rankpb.RunStep{Generation: s.Generation, Step: s.Step, Tokens: s.Tokens, Positions: s.Positions,
		ResetSlots: intsToPB(s.Reset), Trace: traceToPB(s.Trace)}
	for _, q := range s.Seqs {
		out.Seqs = append(out.Seqs, &rankpb.StepSeq{Id: uint64(q.ID), Slot: int32(q.Slot), Start: int32(q.Start),
			Len: int32(q.Len), Cached: int32(q.Cached), Pages: q.Pages})
	}
	for _, o := range s.Outputs {
		out.Outputs = append(out.Outputs, &rankpb.OutputRow{Id: uint64(o.ID), Row: int32(o.Row), Params: paramsToPB(o.Params),
			Index: int32(o.Index), TopN: int32(o.TopN), Prompt: o.Prompt, Generated: o.Generated,
			Score: o.Score, Target: o.Target, Pos: int32(o.Pos), Logprobs: o.Logprobs})
		if o.Mask != nil {
			row := out.Outputs[len(out.Outputs)-1]
			row.Mask, row.MaskVocab = o.Mask.Words(), int32(o.Mask.Vocab())
		}
	}
	return out
}

func stepFromPB(s *rankpb.RunStep) *actors.RunStep {
	out := &actors.RunStep{Generation: s.Generation, Step: s.Step, Tokens: s.Tokens, Positions: s.Positions,
		Reset: intsFromPB(s.ResetSlots), Trace: traceFromPB(s.Trace)}
	for _, q := range s.Seqs {
		out.Seqs = append(out.Seqs, actors.StepSeq{ID: planner.RequestID(q.Id), Slot: int(q.Slot), Start: int(q.Start),
			Len: int(q.Len), Cached: int(q.Cached), Pages: q.Pages})
	}
	for _, o := range s.Outputs {
		out.Outputs = append(out.Outputs, actors.OutputRow{ID: planner.RequestID(o.Id), Row: int(o.Row), Params: paramsFromPB(o.Params),
			Index: int(o.Index), TopN: int(o.TopN), Prompt: o.Prompt, Generated: o.Generated,
			Score: o.Score, Target: o.Target, Pos: int(o.Pos), Logprobs: o.Logprobs})
		if o.MaskVocab > 0 {
			out.Outputs[len(out.Outputs)-1].Mask = sample.MaskFromWords(o.Mask, int(o.MaskVocab))
		}
	}
	return out
}

func completedToPB(c *actors.StepCompleted) *rankpb.StepCompleted {
	out := &rankpb.StepCompleted{Generation: c.Generation, Step: c.Step, Rank: int32(c.Rank)}
	if c.Err != nil {
		out.Error, out.Aborted = c.Err.Error(), errors.Is(c.Err, nccl.ErrAborted)
	}
	for _, s := range c.Samples {
		p := &rankpb.Sampled{Id: uint64(s.ID), Token: logprobToPB(s.Result.Token), Scored: s.Scored, Pos: int32(s.Pos)}
		for _, t := range s.Result.Top {
			p.Top = append(p.Top, logprobToPB(t))
		}
		out.Samples = append(out.Samples, p)
	}
	return out
}

func completedFromPB(c *rankpb.StepCompleted, where string) *actors.StepCompleted {
	out := &actors.StepCompleted{Generation: c.Generation, Step: c.Step, Rank: int(c.Rank), Err: remoteErr(where, c.Error, c.Aborted)}
	for _, s := range c.Samples {
		r := sample.Result{Token: logprobFromPB(s.Token)}
		for _, t := range s.Top {
			r.Top = append(r.Top, logprobFromPB(t))
		}
		out.Samples = append(out.Samples, actors.Sampled{ID: planner.RequestID(s.Id), Result: r, Scored: s.Scored, Pos: int(s.Pos)})
	}
	return out
}

func readyToPB(r *actors.ShardReady) *rankpb.ShardReady {
	out := &rankpb.ShardReady{Generation: r.Generation, Rank: int32(r.Rank),
		Capacity: &rankpb.Capacity{Slots: int32(r.Capacity.Slots), Pages: int32(r.Capacity.Pages), PageSize: int32(r.Capacity.PageSize)}}
	if r.Err != nil {
		out.Error = r.Err.Error()
	}
	return out
}

func readyFromPB(r *rankpb.ShardReady, where string) *actors.ShardReady {
	c := r.GetCapacity()
	return &actors.ShardReady{Generation: r.Generation, Rank: int(r.Rank), Err: remoteErr(where, r.Error, false),
		Capacity: model.Capacity{Slots: int(c.GetSlots()), Pages: int(c.GetPages()), PageSize: int(c.GetPageSize())}}
}

// remoteErr rebuilds a rank's error on the engine side, naming where it ran.
func remoteErr(where, msg string, aborted bool) error {
	switch {
	case msg == "":
		return nil
	case aborted:
		return fmt.Errorf("%s: %s: %w", where, msg, nccl.ErrAborted)
	default:
		return fmt.Errorf("%s: %s", where, msg)
	}
}

func logprobToPB(t sample.TokenLogprob) *rankpb.TokenLogprob {
	return &rankpb.TokenLogprob{Id: t.ID, Logprob: t.Logprob}
}

func logprobFromPB(t *rankpb.TokenLogprob) sample.TokenLogprob {
	return sample.TokenLogprob{ID: t.GetId(), Logprob: t.GetLogprob()}
}

func intsToPB(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func intsFromPB(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}
