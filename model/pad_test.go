package model

import (
	"slices"
	"testing"

	"cohort/kernels"
)

// padStepper is a backend that records nothing and pads decode steps to
// multiples of 4, for RunStep's contract: what run sees, under which key,
// and which rows come back.
type padStepper struct {
	kernels.Backend // nil: RunStep calls nothing else
	begun           []string
	replays         []string
	headRows        int
}

func (p *padStepper) BeginStep(key string, _ kernels.StepInputs) { p.begun = append(p.begun, key) }
func (p *padStepper) EndStep(kernels.Tensor)                     {}
func (p *padStepper) ReplayStep(key string, _ kernels.StepInputs) (kernels.Tensor, bool) {
	p.replays = append(p.replays, key)
	return nil, false
}
func (p *padStepper) DecodeBucket(rows int) int { return (rows + 3) / 4 * 4 }
func (p *padStepper) DecodeBuckets(maxRows int) []int {
	var out []int
	for n := 4; n < maxRows+4; n += 4 {
		out = append(out, n)
	}
	return out
}
func (p *padStepper) Head(t kernels.Tensor, rows int) kernels.Tensor {
	p.headRows = rows
	return t
}

// fakeLogits is the run's result: a tensor of its rows.
type fakeLogits struct{ kernels.Tensor }

func decodeInputs(n int) kernels.StepInputs {
	b := &kernels.Batch{}
	in := kernels.StepInputs{Batch: b}
	for i := range n {
		b.Positions = append(b.Positions, int32(10+i))
		b.Seqs = append(b.Seqs, kernels.Seq{Slot: i, Start: i, Len: 1, Cached: 10 + i, Pages: []int32{int32(i)}})
		in.Tokens = append(in.Tokens, int32(100+i))
		in.Rows = append(in.Rows, i)
	}
	return in
}

func TestRunStepPadsDecode(t *testing.T) {
	pad := &Pad{Slot: 7, Page: 99}
	for _, tc := range []struct {
		name     string
		in       kernels.StepInputs
		pad      *Pad
		wantRows int    // rows run sees
		wantKey  string // the key it is recorded under
		wantHead int    // rows asked of Head (0: not asked)
	}{
		{"three rows pad to four", decodeInputs(3), pad, 4, "m/decode/4/model-1/state-2", 3},
		{"a full bucket is not padded", decodeInputs(4), pad, 4, "m/decode/4/model-1/state-2", 0},
		{"no pad place", decodeInputs(3), nil, 3, "m/decode/3/model-1/state-2", 0},
		{"a prefill is never padded", kernels.StepInputs{Tokens: []int32{1, 2, 3},
			Batch: &kernels.Batch{Positions: []int32{0, 1, 2}, Seqs: []kernels.Seq{{Start: 0, Len: 3}}}, Rows: []int{2}}, pad, 3, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &padStepper{}
			var seen kernels.StepInputs
			_, err := RunStep(be, "m", 1, 2, tc.in, tc.pad, func(in kernels.StepInputs) (kernels.Tensor, error) {
				seen = in
				return fakeLogits{}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if seen.Batch.Rows() != tc.wantRows || len(seen.Tokens) != tc.wantRows {
				t.Fatalf("run saw %d rows and %d tokens, want %d", seen.Batch.Rows(), len(seen.Tokens), tc.wantRows)
			}
			if !slices.Equal(be.begun, []string{tc.wantKey}) {
				t.Errorf("BeginStep keys %q, want %q", be.begun, tc.wantKey)
			}
			if tc.wantKey != "" && !slices.Equal(be.replays, []string{tc.wantKey}) {
				t.Errorf("ReplayStep keys %q, want %q", be.replays, tc.wantKey)
			}
			if be.headRows != tc.wantHead {
				t.Errorf("Head asked for %d rows, want %d", be.headRows, tc.wantHead)
			}
			if err := kernels.CheckBatch(seen.Batch, seen.Batch.Rows(), true); err != nil {
				t.Errorf("padded batch: %v", err)
			}
		})
	}
}

func TestPadDecode(t *testing.T) {
	in := decodeInputs(2)
	got := PadDecode(in, 5, Pad{Slot: 7, Page: 99})
	if !slices.Equal(got.Tokens, []int32{100, 101, 0, 0, 0}) || !slices.Equal(got.Batch.Positions, []int32{10, 11, 0, 0, 0}) ||
		!slices.Equal(got.Rows, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("tokens %v positions %v rows %v", got.Tokens, got.Batch.Positions, got.Rows)
	}
	for i, s := range got.Batch.Seqs {
		pad := i >= 2
		if s.Pad != pad || s.Start != i || s.Len != 1 || pad && (s.Slot != 7 || !slices.Equal(s.Pages, []int32{99}) || s.Cached != 0) {
			t.Errorf("seq %d: %+v", i, s)
		}
	}
	if len(in.Tokens) != 2 || len(in.Batch.Seqs) != 2 || len(in.Rows) != 2 {
		t.Errorf("the step's own inputs changed: %+v", in)
	}
	if err := kernels.CheckBatch(got.Batch, 5, true); err != nil {
		t.Errorf("CheckBatch: %v", err)
	}
}

// padState is a state with a pad place (or none: nil).
type padState struct{ pad *Pad }

func (padState) Reset(int)   {}
func (s padState) Pad() *Pad { return s.pad }

// stepModel runs its steps through RunStep (family "m", model 1, state 2)
// and keeps what run saw.
type stepModel struct{ seen []kernels.StepInputs }

func (m *stepModel) Forward(be kernels.Backend, st State, tokens []int32, b *kernels.Batch, rows []int) (kernels.Tensor, error) {
	in := kernels.StepInputs{Tokens: tokens, Batch: b, Rows: rows}
	return RunStep(be, "m", 1, 2, in, st.(PaddedState).Pad(), func(in kernels.StepInputs) (kernels.Tensor, error) {
		m.seen = append(m.seen, in)
		return fakeLogits{}, nil
	})
}

func (m *stepModel) NewState(kernels.Backend, int, int, int) State { return nil }

func TestWarmDecode(t *testing.T) {
	pad := &Pad{Slot: 7, Page: 99}
	be, m := &padStepper{}, &stepModel{}
	buckets, err := WarmDecode(be, m, padState{pad}, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(buckets, []int{4, 8}) {
		t.Fatalf("warmed buckets %v, want [4 8]", buckets)
	}
	want := []string{"m/decode/4/model-1/state-2", "m/decode/4/model-1/state-2", "m/decode/8/model-1/state-2", "m/decode/8/model-1/state-2"}
	if !slices.Equal(be.begun, want) {
		t.Errorf("BeginStep keys %q, want %q (each bucket run eagerly, then recorded)", be.begun, want)
	}
	for i, in := range m.seen {
		for j, s := range in.Batch.Seqs {
			if !s.Pad || s.Slot != pad.Slot || !slices.Equal(s.Pages, []int32{pad.Page}) || s.Start != j || s.Len != 1 {
				t.Errorf("step %d seq %d: %+v, want a pad row in the pad place", i, j, s)
			}
		}
		if err := kernels.CheckBatch(in.Batch, in.Batch.Rows(), true); err != nil {
			t.Errorf("step %d: %v", i, err)
		}
	}
	if be.headRows != 0 {
		t.Errorf("Head asked for %d rows: a bucket's own step is not padded", be.headRows)
	}

	for _, tc := range []struct {
		name string
		be   kernels.Backend
		st   State
	}{
		{"no pad place", &padStepper{}, padState{}},
		{"a backend that does not pad", struct{ kernels.Backend }{}, padState{pad}},
	} {
		m := &stepModel{}
		if got, err := WarmDecode(tc.be, m, tc.st, 7); err != nil || got != nil || len(m.seen) != 0 {
			t.Errorf("%s: warmed %v (%d steps), err %v; want nothing", tc.name, got, len(m.seen), err)
		}
	}
}
