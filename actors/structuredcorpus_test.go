package actors

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"cohort/model/grammar"
	"cohort/model/sample"
)

// TestStructuredCorpus runs every schema of the grammar corpus through the
// tiny random-weight model at temperature 1 with three seeds, 32 requests
// at a time, and validates each output with an independent JSON Schema
// library (format assertions on): every output must validate.
func TestStructuredCorpus(t *testing.T) {
	files, err := filepath.Glob("../model/grammar/testdata/schemas/*.json")
	if err != nil || len(files) < 200 {
		t.Fatalf("corpus: %d files, %v", len(files), err)
	}
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, nil)
	cache, err := e.Grammars()
	if err != nil {
		t.Fatal(err)
	}
	type job struct {
		name     string
		validate func(string) error
		s        *Stream
	}
	var pending []job
	drain := func() {
		for _, j := range pending {
			_, out, last := collect(t, j.s) // the text: an ending EOS is not in it
			if last.Err != nil || last.Finish != "stop" {
				t.Errorf("%s: finish %q %v after %q", j.name, last.Finish, last.Err, out)
			} else if err := j.validate(out); err != nil {
				t.Errorf("%s: output %q does not validate: %v", j.name, out, err)
			}
		}
		pending = pending[:0]
	}
	seeds := []uint64{0, 1, 2}
	for i, f := range files {
		if testing.Short() || raceEnabled {
			// Short mode: every third schema, with one seed each (the full
			// run takes about a minute on two cores).
			if i%3 != 0 || raceEnabled && i%15 != 0 {
				continue
			}
			seeds = []uint64{uint64(i/3) % 3}
		}
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		schema := corpusSchema(t, f)
		g, err := cache.Get("json", string(schema), func(v *grammar.Vocab) (*grammar.Grammar, error) { return grammar.JSONSchema(schema, v) })
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		validate := validatorFor(t, schema)
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

func corpusSchema(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f.Schema
}

// validatorFor compiles schema with santhosh-tekuri/jsonschema, formats
// asserted: the judge is not the code under test.
func validatorFor(t *testing.T, schema []byte) func(string) error {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(schema)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return func(out string) error {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
		if err != nil {
			return err
		}
		return sch.Validate(v)
	}
}
