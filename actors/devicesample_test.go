package actors

import (
	"slices"
	"testing"

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
	greedy := sample.Params{}
	for _, tc := range []struct {
		name   string
		rows   []OutputRow
		device bool
	}{
		{"greedy", []OutputRow{{Row: 2}, {Row: 5}}, true},
		{"one row wants logprobs", []OutputRow{{Row: 2}, {Row: 5, Logprobs: true}}, false},
		{"top logprobs", []OutputRow{{Row: 2, TopN: 3}, {Row: 5}}, false},
		{"temperature", []OutputRow{{Row: 2, Params: sample.Params{Temperature: 0.7, Seed: 3}}, {Row: 5}}, false},
		{"logit bias", []OutputRow{{Row: 2, Params: sample.Params{LogitBias: []sample.TokenBias{{ID: 4, Bias: 50}}}}, {Row: 5}}, false},
		{"min tokens with stops", []OutputRow{{Row: 2, Params: sample.Params{MinTokens: 2, StopIDs: []int32{1}}}, {Row: 5}}, false},
		{"min tokens reached", []OutputRow{{Row: 2, Index: 3, Params: sample.Params{MinTokens: 2, StopIDs: []int32{1}}}, {Row: 5, Params: greedy}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := &RunStep{Tokens: []int32{1, 2, 3, 4, 5, 6}, Positions: []int32{0, 1, 2, 0, 1, 2},
				Reset:   []int{0, 1},
				Seqs:    []StepSeq{{Slot: 0, Len: 3, Pages: []int32{0}}, {Slot: 1, Start: 3, Len: 3, Pages: []int32{1}}},
				Outputs: tc.rows}
			before := be.calls
			got, err := executeStep(be, m, st, msg, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			if used := be.calls > before; used != tc.device {
				t.Errorf("device sampler used: %v, want %v", used, tc.device)
			}
			want, err := executeStep(be.Backend, m, st, msg, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids := func(s []Sampled) []int32 {
				var out []int32
				for _, x := range s {
					out = append(out, x.Result.Token.ID)
				}
				return out
			}
			if !slices.Equal(ids(got), ids(want)) {
				t.Errorf("tokens %v, host sampler %v", ids(got), ids(want))
			}
		})
	}
}
