package remote

// Conversions between the engine's rank messages and their protobuf form
// (rankpb), for ranks in other processes.

import (
	"context"
	"encoding/json"
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
	return &rankpb.CapacityInput{Budget: c.Budget, Reserve: c.Reserve, ElemBytes: int32(c.ElemBytes),
		PageSize: int32(c.PageSize), MaxSeqs: int32(c.MaxSeqs), MaxModelLen: int32(c.MaxModelLen), Snapshots: c.Snapshots,
		MaxStepTokens: int32(c.MaxStepTokens), MaxStepOutputs: int32(c.MaxStepOutputs)}
}

func capacityInputFromPB(c *rankpb.CapacityInput) model.CapacityInput {
	return model.CapacityInput{Budget: c.GetBudget(), Reserve: c.GetReserve(),
		ElemBytes: int(c.GetElemBytes()), PageSize: int(c.GetPageSize()), MaxSeqs: int(c.GetMaxSeqs()), MaxModelLen: int(c.GetMaxModelLen()),
		Snapshots: c.GetSnapshots(), MaxStepTokens: int(c.GetMaxStepTokens()), MaxStepOutputs: int(c.GetMaxStepOutputs())}
}

func stepToPB(s *actors.RunStep) (*rankpb.RunStep, error) {
	out := &rankpb.RunStep{Generation: s.Generation, Step: s.Step, Tokens: s.Tokens, Trace: traceToPB(s.Trace)}
	for _, id := range s.Finished {
		out.Finished = append(out.Finished, uint64(id))
	}
	for _, a := range s.Admitted {
		pa, err := admissionToPB(a)
		if err != nil {
			return nil, err
		}
		out.Admitted = append(out.Admitted, pa)
	}
	for _, q := range s.Seqs {
		out.Seqs = append(out.Seqs, &rankpb.StepSeq{Id: uint64(q.ID), Len: int32(q.Len), NewPages: q.NewPages})
	}
	for _, sv := range s.Saves {
		out.Saves = append(out.Saves, &rankpb.SnapshotSave{Id: uint64(sv.ID), Place: int32(sv.Place)})
	}
	for _, o := range s.Outputs {
		row := &rankpb.OutputRow{Id: uint64(o.ID), Row: int32(o.Row), Score: o.Score, Target: o.Target, Pos: int32(o.Pos)}
		if o.Mask != nil {
			row.Mask, row.MaskVocab = o.Mask.Words(), int32(o.Mask.Vocab())
		}
		out.Outputs = append(out.Outputs, row)
	}
	return out, nil
}

func stepFromPB(s *rankpb.RunStep) (*actors.RunStep, error) {
	out := &actors.RunStep{Generation: s.Generation, Step: s.Step, Tokens: s.Tokens, Trace: traceFromPB(s.Trace)}
	for _, id := range s.Finished {
		out.Finished = append(out.Finished, planner.RequestID(id))
	}
	for _, a := range s.Admitted {
		ad, err := admissionFromPB(a)
		if err != nil {
			return nil, err
		}
		out.Admitted = append(out.Admitted, ad)
	}
	for _, q := range s.Seqs {
		out.Seqs = append(out.Seqs, actors.StepSeq{ID: planner.RequestID(q.Id), Len: int(q.Len), NewPages: q.NewPages})
	}
	for _, sv := range s.Saves {
		out.Saves = append(out.Saves, actors.SnapshotSave{ID: planner.RequestID(sv.Id), Place: int(sv.Place)})
	}
	for _, o := range s.Outputs {
		row := actors.OutputRow{ID: planner.RequestID(o.Id), Row: int(o.Row), Score: o.Score, Target: o.Target, Pos: int(o.Pos)}
		if o.MaskVocab > 0 {
			row.Mask = sample.MaskFromWords(o.Mask, int(o.MaskVocab))
		}
		out.Outputs = append(out.Outputs, row)
	}
	return out, nil
}

// admissionToPB carries the sampling parameters as JSON, so a parameter
// added to sample.Params needs no change to the wire.
func admissionToPB(a actors.AdmitSeq) (*rankpb.AdmitSeq, error) {
	params, err := json.Marshal(a.Sampling.Params)
	if err != nil {
		return nil, fmt.Errorf("remote: request %d's sampling parameters: %w", a.ID, err)
	}
	return &rankpb.AdmitSeq{Id: uint64(a.ID), Slot: int32(a.Slot), PromptLen: int32(a.PromptLen), Params: params,
		TopN: int32(a.Sampling.TopN), Logprobs: a.Sampling.Logprobs, Cached: int32(a.Cached), Restore: int32(a.Restore), History: a.History}, nil
}

func admissionFromPB(a *rankpb.AdmitSeq) (actors.AdmitSeq, error) {
	out := actors.AdmitSeq{ID: planner.RequestID(a.Id), Slot: int(a.Slot), PromptLen: int(a.PromptLen),
		Sampling: actors.Sampling{TopN: int(a.TopN), Logprobs: a.Logprobs}, Cached: int(a.Cached), Restore: int(a.Restore), History: a.History}
	if err := json.Unmarshal(a.Params, &out.Sampling.Params); err != nil {
		return out, fmt.Errorf("remote: request %d's sampling parameters: %w", a.Id, err)
	}
	return out, nil
}

func completedToPB(c *actors.StepCompleted) *rankpb.StepCompleted {
	out := &rankpb.StepCompleted{Generation: c.Generation, Step: c.Step, Rank: int32(c.Rank)}
	if c.Err != nil {
		out.Error, out.Aborted = c.Err.Error(), errors.Is(c.Err, nccl.ErrAborted)
	}
	for _, r := range c.Results {
		p := &rankpb.Result{Token: logprobToPB(r.Token)}
		for _, t := range r.Top {
			p.Top = append(p.Top, logprobToPB(t))
		}
		out.Results = append(out.Results, p)
	}
	return out
}

func completedFromPB(c *rankpb.StepCompleted, where string) *actors.StepCompleted {
	out := &actors.StepCompleted{Generation: c.Generation, Step: c.Step, Rank: int(c.Rank), Err: remoteErr(where, c.Error, c.Aborted)}
	for _, p := range c.Results {
		r := sample.Result{Token: logprobFromPB(p.Token)}
		for _, t := range p.Top {
			r.Top = append(r.Top, logprobFromPB(t))
		}
		out.Results = append(out.Results, r)
	}
	return out
}

func readyToPB(r *actors.ShardReady) *rankpb.ShardReady {
	out := &rankpb.ShardReady{Generation: r.Generation, Rank: int32(r.Rank),
		Capacity: &rankpb.Capacity{Slots: int32(r.Capacity.Slots), Pages: int32(r.Capacity.Pages), PageSize: int32(r.Capacity.PageSize),
			Snapshots: int32(r.Capacity.Snapshots), Scratch: r.Capacity.Scratch}}
	if r.Err != nil {
		out.Error = r.Err.Error()
	}
	return out
}

func readyFromPB(r *rankpb.ShardReady, where string) *actors.ShardReady {
	c := r.GetCapacity()
	return &actors.ShardReady{Generation: r.Generation, Rank: int(r.Rank), Err: remoteErr(where, r.Error, false),
		Capacity: model.Capacity{Slots: int(c.GetSlots()), Pages: int(c.GetPages()), PageSize: int(c.GetPageSize()), Snapshots: int(c.GetSnapshots()),
			Scratch: c.GetScratch()}}
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
