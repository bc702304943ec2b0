package actors

import (
	"testing"

	"cohort/model/grammar"
	"cohort/model/grammar/grammartest"
	"cohort/model/sample"
)

// TestStructuredCorpus runs every schema of the grammar corpus through the
// tiny random-weight model at temperature 1 with three seeds, 32 requests
// at a time, and validates each output with an independent JSON Schema
// library (grammartest.Validator): every output must validate.
func TestStructuredCorpus(t *testing.T) {
	corpus := grammartest.Corpus(t)
	if len(corpus) < 200 {
		t.Fatalf("corpus: %d schemas", len(corpus))
	}
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, nil)
	cache, err := e.Grammars()
	if err != nil {
		t.Fatal(err)
	}
	type job struct {
		name     string
		validate func([]byte) error
		s        *Stream
	}
	var pending []job
	drain := func() {
		for _, j := range pending {
			_, out, last := collect(t, j.s) // the text: an ending EOS is not in it
			if last.Err != nil || last.Finish != "stop" {
				t.Errorf("%s: finish %q %v after %q", j.name, last.Finish, last.Err, out)
			} else if err := j.validate([]byte(out)); err != nil {
				t.Errorf("%s: output %q does not validate: %v", j.name, out, err)
			}
		}
		pending = pending[:0]
	}
	seeds := []uint64{0, 1, 2}
	for i, cs := range corpus {
		if testing.Short() || raceEnabled {
			// Short mode: every third schema, with one seed each (the full
			// run takes about a minute on two cores).
			if i%3 != 0 || raceEnabled && i%30 != 0 {
				continue
			}
			seeds = []uint64{uint64(i/3) % 3}
		}
		name, schema := cs.Name, cs.Schema
		g, err := cache.Get("json", string(schema), func(v *grammar.Vocab) (*grammar.Grammar, error) { return grammar.JSONSchema(schema, v) })
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		validate := grammartest.Validator(t, schema)
		for _, seed := range seeds {
			r := Request{Prompt: []int32{int32(len(pending) + 1), 17, 33}, MaxTokens: max(256, 2*g.MinLen()), Grammar: g,
				IgnoreEOS: seed == 2, Params: sample.Params{Temperature: 1, Seed: seed}}
			pending = append(pending, job{name, validate, mustSubmit(t, e, r)})
		}
		if len(pending) >= 30 {
			drain()
		}
	}
	drain()
}
