package actors

import (
	"slices"
	"testing"

	"cohort/actors/planner"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/sample"
)

// argmaxBackend is the CPU backend with a DeviceSampler that counts its
// calls (the CUDA backend's Argmax runs on the GPU; this one on the host).
type argmaxBackend struct {
	*cpu.Backend
	calls int
}

func (b *argmaxBackend) Argmax(logits kernels.Tensor) []int32 {
	b.calls++
	host := b.Download(logits)
	rows := logits.Shape()[0]
	vocab := len(host) / rows
	ids := make([]int32, rows)
	for r := range ids {
		ids[r] = int32(sample.Argmax(host[r*vocab : (r+1)*vocab]))
	}
	return ids
}

// TestDeviceArgmax: executeStep lets a DeviceSampler pick the tokens only
// when every row is a plain argmax without logprobs, and the tokens are
// those of the host sampler either way.
func TestDeviceArgmax(t *testing.T) {
	tm := openPreset(t, "tiny")
	be := &argmaxBackend{Backend: cpu.New(cpu.Options{Threads: 1})}
	m, err := tm.ck.Load(be, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	st := m.NewState(be, 2, 8, 16)
	admit := func(id int, promptLen int, sm Sampling) AdmitSeq {
		return AdmitSeq{ID: planner.RequestID(id), Slot: id - 1, PromptLen: promptLen, Sampling: sm}
	}
	plain := Sampling{}
	for _, tc := range []struct {
		name   string
		first  Sampling
		second AdmitSeq
		device bool
	}{
		{"greedy", plain, admit(2, 3, plain), true},
		{"one row wants logprobs", plain, admit(2, 3, Sampling{Logprobs: true}), false},
		{"top logprobs", Sampling{TopN: 3}, admit(2, 3, plain), false},
		{"temperature", Sampling{Params: sample.Params{Temperature: 0.7, Seed: 3}}, admit(2, 3, plain), false},
		{"logit bias", Sampling{Params: sample.Params{LogitBias: []sample.TokenBias{{ID: 4, Bias: 50}}}}, admit(2, 3, plain), false},
		{"min tokens with stops", Sampling{Params: sample.Params{MinTokens: 2, StopIDs: []int32{1}}}, admit(2, 3, plain), false},
		// Prompt length 0: the three tokens count as generated, so the
		// draw is the fourth and min_tokens no longer bans the stops.
		{"min tokens reached", plain, admit(2, 0, Sampling{Params: sample.Params{MinTokens: 2, StopIDs: []int32{1}}}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := &RunStep{Tokens: []int32{1, 2, 3, 4, 5, 6},
				Admitted: []AdmitSeq{admit(1, 3, tc.first), tc.second},
				Seqs:     []StepSeq{{ID: 1, Len: 3, NewPages: []int32{0}}, {ID: 2, Len: 3, NewPages: []int32{1}}},
				Outputs:  []OutputRow{{ID: 1, Row: 2}, {ID: 2, Row: 5}}}
			before := be.calls
			got, err := executeStep(be, m, st, newSeqCache(true), msg, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			if used := be.calls > before; used != tc.device {
				t.Errorf("device sampler used: %v, want %v", used, tc.device)
			}
			want, err := executeStep(be.Backend, m, st, newSeqCache(true), msg, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids := func(s []sample.Result) []int32 {
				var out []int32
				for _, x := range s {
					out = append(out, x.Token.ID)
				}
				return out
			}
			if !slices.Equal(ids(got), ids(want)) {
				t.Errorf("tokens %v, host sampler %v", ids(got), ids(want))
			}
		})
	}
}
