package remote

import (
	"reflect"
	"testing"

	"cohort/actors"
	"cohort/model/sample"
)

// TestParamsWireRoundTrip: every sampling parameter survives the protobuf
// form remote ranks receive.
func TestParamsWireRoundTrip(t *testing.T) {
	for _, p := range []sample.Params{
		{},
		{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, Seed: 1 << 40, PresencePenalty: 0.5,
			FrequencyPenalty: -0.25, RepetitionPenalty: 1.1,
			LogitBias: []sample.TokenBias{{ID: 3, Bias: -100}, {ID: 70000, Bias: 2.5}}, MinTokens: 4, StopIDs: []int32{1, 9}},
	} {
		if got := paramsFromPB(paramsToPB(p)); !reflect.DeepEqual(got, p) {
			t.Errorf("round trip of %+v gave %+v", p, got)
		}
	}
}

// TestStepWireRoundTrip: a step's output rows (sampled and prompt-scored)
// and its samples survive the protobuf form.
func TestStepWireRoundTrip(t *testing.T) {
	step := &actors.RunStep{Generation: 3, Step: 9, Tokens: []int32{4, 5, 6}, Positions: []int32{0, 1, 2},
		Seqs: []actors.StepSeq{{ID: 7, Slot: 1, Start: 0, Len: 3, Cached: 0, Pages: []int32{2}}},
		Outputs: []actors.OutputRow{
			{ID: 7, Row: 0, TopN: 2, Score: true, Target: 5, Pos: 1},
			{ID: 7, Row: 1, TopN: 2, Score: true, Target: 6, Pos: 2},
			{ID: 7, Row: 2, TopN: 2, Index: 0, Params: sample.Params{Temperature: 0.5, Seed: 1}, Logprobs: true},
		}}
	got := stepFromPB(stepToPB(step))
	if !reflect.DeepEqual(got.Outputs, step.Outputs) || !reflect.DeepEqual(got.Seqs, step.Seqs) {
		t.Errorf("outputs\n got %+v\nwant %+v", got.Outputs, step.Outputs)
	}
	done := &actors.StepCompleted{Generation: 3, Step: 9, Samples: []actors.Sampled{
		{ID: 7, Scored: true, Pos: 1, Result: sample.Result{Token: sample.TokenLogprob{ID: 5, Logprob: -1.5}}},
		{ID: 7, Result: sample.Result{Token: sample.TokenLogprob{ID: 8, Logprob: -0.25},
			Top: []sample.TokenLogprob{{ID: 8, Logprob: -0.25}, {ID: 2, Logprob: -2}}}},
	}}
	if back := completedFromPB(completedToPB(done), "test"); !reflect.DeepEqual(back.Samples, done.Samples) {
		t.Errorf("samples\n got %+v\nwant %+v", back.Samples, done.Samples)
	}
}
