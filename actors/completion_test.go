package actors

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors/planner"
	"cohort/model/sample"
)

// TestFinishRule: the one rule that ends a request on its tokens.
func TestFinishRule(t *testing.T) {
	const eos, stop, other = 2, 7, 5
	rule := finishRule{maxTokens: 4, eos: []int32{eos}, stopIDs: []int32{stop}}
	ignoring := rule
	ignoring.ignoreEOS = true
	for _, tc := range []struct {
		name      string
		rule      finishRule
		tok       int32
		generated int
		complete  bool
		want      ending
	}{
		{"goes on", rule, other, 1, false, ending{}},
		{"eos", rule, eos, 1, false, ending{reason: "stop", stopToken: true}},
		{"eos ignored", ignoring, eos, 1, false, ending{}},
		{"stop id", ignoring, stop, 1, false, ending{reason: "stop", stopToken: true}},
		{"stop id at the limit", rule, stop, 4, false, ending{reason: "stop", stopToken: true}},
		{"length", rule, other, 4, false, ending{reason: "length"}},
		{"grammar complete", rule, other, 2, true, ending{reason: "stop"}},
		{"grammar complete on an ignored eos", ignoring, eos, 2, true, ending{reason: "stop", stopToken: true}},
		{"grammar complete at the limit", rule, other, 4, true, ending{reason: "stop"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rule.after(tc.tok, tc.generated, tc.complete); got != tc.want {
				t.Errorf("after(%d, %d, %v) = %+v, want %+v", tc.tok, tc.generated, tc.complete, got, tc.want)
			}
		})
	}
}

// TestCompletionCounts: a completion's tokens are the prompt and then each
// added token; its count and what is left derive from them.
func TestCompletionCounts(t *testing.T) {
	c := newCompletion(&Request{Prompt: []int32{1, 2, 3}, MaxTokens: 3}, []int32{0})
	for i, want := range []string{"", "", "length"} {
		if got := c.add(int32(10 + i)).reason; got != want {
			t.Fatalf("token %d ends %q, want %q", i+1, got, want)
		}
		if c.generated() != i+1 || c.left() != 2-i {
			t.Fatalf("after token %d: generated %d, left %d", i+1, c.generated(), c.left())
		}
	}
	if got := c.tokens; len(got) != 6 || got[0] != 1 || got[5] != 12 {
		t.Errorf("tokens %v, want the prompt then 10 11 12", got)
	}
}

// TestResultsMustMatchOutputs: rank 0's reply has one result per output
// row (the engine knows whose each one is only from their order), so a
// reply with another count fails the step instead of misattributing
// tokens.
func TestResultsMustMatchOutputs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results int
		fails   bool
	}{
		{"one per row", 2, false},
		{"one missing", 1, true},
		{"one extra", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scheduler{live: map[planner.RequestID]*liveRequest{}}
			s.inflight = &inflightStep{plan: planner.Plan{Step: 4}, replied: make([]bool, 2),
				outputs: []OutputRow{{ID: 1}, {ID: 2}}}
			g := &rankGroup{gen: 1, ranks: make([]*actor.PID, 2)}
			f := s.completed(nil, &StepCompleted{Generation: 1, Step: 4, Rank: 0,
				Results: make([]sample.Result, tc.results)}, g)
			if (f != nil) != tc.fails {
				t.Fatalf("failure %v, want one: %v", f, tc.fails)
			}
			if f != nil && f.Rank != 0 {
				t.Errorf("failure names rank %d, want 0", f.Rank)
			}
		})
	}
}
