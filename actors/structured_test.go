package actors

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"cohort/model/grammar"
	"cohort/model/sample"
)

// structuredSchema is a small schema with most of what grammars compile:
// an object with required and optional members, an enum, bounded
// integers, a bounded array and a pattern.
const structuredSchema = `{"type":"object","properties":{
	"name":{"type":"string","maxLength":12},
	"kind":{"enum":["cat","dog",null]},
	"age":{"type":"integer","minimum":0,"maximum":30},
	"tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]{1,5}$"},"maxItems":3},
	"ok":{"type":"boolean"}},
	"required":["name","kind","age"]}`

func compileSchema(t testing.TB, e *Engine, schema string) *grammar.Grammar {
	t.Helper()
	cache, err := e.Grammars()
	if err != nil {
		t.Fatal(err)
	}
	g, err := cache.Get("json", schema, func(v *grammar.Vocab) (*grammar.Grammar, error) { return grammar.JSONSchema([]byte(schema), v) })
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// checkStructured fails unless text is a complete match of g that parses
// as JSON.
func checkStructured(t testing.TB, g *grammar.Grammar, text string, last Event) {
	t.Helper()
	if last.Err != nil || last.Finish != "stop" {
		t.Fatalf("finish %q %v, text %q", last.Finish, last.Err, text)
	}
	if !g.Matches(text) || !json.Valid([]byte(text)) {
		t.Fatalf("output %q is not a complete, valid document", text)
	}
}

// TestStructuredMixedBatch: constrained rows (greedy and seeded, several
// budgets) run in one batch with unconstrained ones, at TP 1 and 2; every
// constrained output is a complete match, and the unconstrained requests
// make exactly the tokens they make alone.
func TestStructuredMixedBatch(t *testing.T) {
	tm := openPreset(t, "tiny")
	for _, tp := range []int{1, 2} {
		t.Run(fmt.Sprint("tp", tp), func(t *testing.T) {
			e := startEngine(t, tm, tp, nil)
			g := compileSchema(t, e, structuredSchema)
			plain := mixedRequests(6, tm.tok.VocabSize())
			type sub struct {
				r Request
				s *Stream
			}
			var subs []sub
			for i := range 8 {
				r := Request{Prompt: []int32{int32(5 + i), 9, 11}, MaxTokens: 40 + 10*i, Grammar: g, IgnoreEOS: i%3 == 0,
					Params: sample.Params{Temperature: float64(i % 2), Seed: uint64(i)}}
				subs = append(subs, sub{r, mustSubmit(t, e, r)})
				subs = append(subs, sub{plain[i%len(plain)], mustSubmit(t, e, plain[i%len(plain)])})
			}
			for _, x := range subs {
				ids, text, last := collect(t, x.s)
				if x.r.Grammar != nil {
					checkStructured(t, g, text, last)
					continue
				}
				if want := aloneTokens(t, tm, x.r); !slices.Equal(ids, want) {
					t.Fatalf("unconstrained request: %v, want %v", ids, want)
				}
			}
		})
	}
}

// TestStructuredTooSmallBudget: a max_tokens below the grammar's shortest
// output is refused at submission.
func TestStructuredTooSmallBudget(t *testing.T) {
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, nil)
	g := compileSchema(t, e, structuredSchema)
	_, err := e.Submit(Request{Prompt: []int32{1}, MaxTokens: 5, Grammar: g})
	if !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Submit = %v, want ErrInvalidRequest", err)
	}
	other, err := grammar.JSONSchema([]byte(`{"type":"string"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(Request{Prompt: []int32{1}, MaxTokens: 50, Grammar: other}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Submit with a grammar of no vocabulary = %v, want ErrInvalidRequest", err)
	}
}

// TestStructuredSurvivesReplay: a rank failure while constrained requests
// decode replays them; their outputs equal the fault-free run's.
func TestStructuredSurvivesReplay(t *testing.T) {
	tm := openPreset(t, "tiny")
	run := func(e *Engine, inject bool) []string {
		g := compileSchema(t, e, structuredSchema)
		var streams []*Stream
		for i := range 4 {
			streams = append(streams, mustSubmit(t, e, Request{Prompt: []int32{int32(3 + i), 4}, MaxTokens: 60, Grammar: g,
				IgnoreEOS: true, Params: sample.Params{Temperature: 1, Seed: uint64(40 + i)}}))
		}
		var first []int32
		if inject {
			ev, err := streams[0].Recv(t.Context()) // decoding has begun
			if err != nil || !ev.HasToken {
				t.Fatal(ev, err)
			}
			first = []int32{ev.Token}
			if err := e.InjectFault(t.Context(), Fault{Kind: FaultStop, Rank: 1}); err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		for i, s := range streams {
			ids, _, last := collect(t, s)
			if i == 0 {
				ids = append(first, ids...)
			}
			checkStructured(t, g, tm.tok.Decode(ids), last)
			out = append(out, fmt.Sprint(ids))
		}
		return out
	}
	want := run(startEngine(t, tm, 2, nil), false)
	e, failures := chaosEngine(t, tm, 2, nil)
	if got := run(e, true); !slices.Equal(got, want) {
		t.Fatalf("after replay:\n%v\nwant\n%v", got, want)
	}
	if len(failures) == 0 {
		t.Fatal("no rank failure was detected: nothing was replayed")
	}
}
