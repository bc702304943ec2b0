package remote

import (
	"reflect"
	"testing"

	"cohort/actors"
	"cohort/actors/planner"
	"cohort/model"
	"cohort/model/sample"
)

// TestAdmissionWireRoundTrip: every sampling parameter survives the
// protobuf form of an admission that remote ranks receive.
func TestAdmissionWireRoundTrip(t *testing.T) {
	for _, p := range []sample.Params{
		{},
		{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, Seed: 1<<64 - 1, PresencePenalty: 0.5,
			FrequencyPenalty: -0.25, RepetitionPenalty: 1.1,
			LogitBias: []sample.TokenBias{{ID: 3, Bias: -100}, {ID: 70000, Bias: 2.5}}, MinTokens: 4, StopIDs: []int32{1, 9}},
		{Temperature: 1.0 / 3, TopP: 0.1 + 0.2, FrequencyPenalty: 1e-300},
	} {
		a := actors.AdmitSeq{ID: 12, Slot: 3, PromptLen: 40, Sampling: actors.Sampling{Params: p, TopN: 5, Logprobs: true}}
		pb, err := admissionToPB(a)
		if err != nil {
			t.Fatal(err)
		}
		got, err := admissionFromPB(pb)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, a) {
			t.Errorf("round trip of %+v gave %+v", a, got)
		}
	}
}

// TestStepWireRoundTrip: a step's diffs (finished ids, admissions with
// their prefix-cache resume, new tokens and pages, snapshot saves), its
// output rows (drawn, masked and prompt-scored) and
// its samples survive the protobuf form.
func TestStepWireRoundTrip(t *testing.T) {
	mask := sample.NewMask(130)
	mask.Set(5)
	mask.Set(129)
	step := &actors.RunStep{Generation: 3, Step: 9, Finished: []planner.RequestID{2, 5}, Tokens: []int32{4, 5, 6, 11},
		Admitted: []actors.AdmitSeq{{ID: 7, Slot: 1, PromptLen: 3, Sampling: actors.Sampling{TopN: 2, Logprobs: true,
			Params: sample.Params{Temperature: 0.5, Seed: 1}}, Restore: -1},
			{ID: 9, Slot: 2, PromptLen: 40, Cached: 32, Restore: 4, History: []int32{1, 2, 3},
				Sampling: actors.Sampling{Params: sample.Params{PresencePenalty: 1}}}},
		Seqs:  []actors.StepSeq{{ID: 7, Len: 3, NewPages: []int32{2}}, {ID: 8, Len: 1}},
		Saves: []actors.SnapshotSave{{ID: 7, Place: 0}, {ID: 8, Place: 12}},
		Outputs: []actors.OutputRow{
			{ID: 7, Row: 0, Score: true, Target: 5, Pos: 1},
			{ID: 7, Row: 1, Score: true, Target: 6, Pos: 2},
			{ID: 7, Row: 2},
			{ID: 8, Row: 3, Mask: mask},
		}}
	pb, err := stepToPB(step)
	if err != nil {
		t.Fatal(err)
	}
	got, err := stepFromPB(pb)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, step) {
		t.Errorf("step\n got %+v\nwant %+v", got, step)
	}
	done := &actors.StepCompleted{Generation: 3, Step: 9, Results: []sample.Result{
		{Token: sample.TokenLogprob{ID: 5, Logprob: -1.5}},
		{Token: sample.TokenLogprob{ID: 8, Logprob: -0.25}, Top: []sample.TokenLogprob{{ID: 8, Logprob: -0.25}, {ID: 2, Logprob: -2}}},
	}}
	if back := completedFromPB(completedToPB(done), "test"); !reflect.DeepEqual(back.Results, done.Results) {
		t.Errorf("results\n got %+v\nwant %+v", back.Results, done.Results)
	}
}

// TestCapacityWireRoundTrip: the capacity plan's input (the prefix
// cache's snapshots, the largest step whose scratch a device rank
// reserves) and the rank's answer (what it reserved) cross the wire
// unchanged.
func TestCapacityWireRoundTrip(t *testing.T) {
	for _, in := range []model.CapacityInput{
		{Budget: 1 << 30, Reserve: 1, ElemBytes: 2, PageSize: 16, MaxSeqs: 8, MaxModelLen: 4096, Snapshots: -1},
		{Budget: 0, Reserve: 0, ElemBytes: 4, PageSize: 16, MaxSeqs: 64, MaxModelLen: 262144, Snapshots: 5 << 20,
			MaxStepTokens: 2048 + 63, MaxStepOutputs: 64 + 67},
	} {
		if got := capacityInputFromPB(capacityInputToPB(in)); got != in {
			t.Errorf("capacity input %+v came back %+v", in, got)
		}
	}
	for _, c := range []model.Capacity{
		{Slots: 4, Pages: 100, PageSize: 16, Snapshots: 9},
		{Slots: 64, Pages: 1 << 20, PageSize: 16, Scratch: 3 << 30},
	} {
		r := &actors.ShardReady{Generation: 2, Rank: 1, Capacity: c}
		if got := readyFromPB(readyToPB(r), "test"); got.Capacity != r.Capacity {
			t.Errorf("capacity %+v came back %+v", r.Capacity, got.Capacity)
		}
	}
}
