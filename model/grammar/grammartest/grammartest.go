// Package grammartest holds what tests of constrained decoding share: the
// schema corpus under model/grammar/testdata (schemas/: JSON Schemas of
// real-world shapes with example instances, in the subset the decoder
// supports; unsupported/: schemas that each use a keyword outside it), and
// an independent judge of outputs, santhosh-tekuri/jsonschema (draft
// 2020-12, format assertions on), so that tests never judge the grammar
// with the grammar.
package grammartest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// testdata returns model/grammar/testdata, wherever the test runs from.
func testdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// Schema is one file of testdata/schemas: a schema in the supported
// subset and 2–4 compact instances that validate against it, with object
// properties in the order the schema declares them.
type Schema struct {
	Name   string            `json:"-"` // the file name without .json, e.g. "001-bare-string"
	Schema json.RawMessage   `json:"schema"`
	Valid  []json.RawMessage `json:"valid"`
}

// Unsupported is one file of testdata/unsupported: a schema that uses
// Keyword, a keyword outside the supported subset (possibly nested deep).
type Unsupported struct {
	Name    string          `json:"-"`
	Schema  json.RawMessage `json:"schema"`
	Keyword string          `json:"keyword"`
}

var corpusFileName = regexp.MustCompile(`^(\d{3})-[a-z0-9]+(?:-[a-z0-9]+)*\.json$`)

// corpusFiles lists dir's .json files in name order, checking their names
// are NNN-name.json numbered 001, 002, … without gaps.
func corpusFiles(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for i, n := range names {
		m := corpusFileName.FindStringSubmatch(n)
		if m == nil {
			t.Fatalf("%s/%s: name is not NNN-short-name.json", dir, n)
		}
		if want := fmt.Sprintf("%03d", i+1); m[1] != want {
			t.Fatalf("%s/%s: expected number %s (files are numbered without gaps)", dir, n, want)
		}
	}
	return names
}

// readStrict decodes path into v, rejecting unknown fields.
func readStrict(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("%s: trailing data after the top-level value", path)
	}
}

// Corpus reads every file of testdata/schemas, in name order.
func Corpus(t testing.TB) []Schema {
	t.Helper()
	return readCorpus(t, "schemas", func(s *Schema) string {
		if len(s.Schema) == 0 {
			return "no schema"
		}
		return ""
	}, func(s *Schema, name string) { s.Name = name })
}

// UnsupportedCorpus reads every file of testdata/unsupported, in name order.
func UnsupportedCorpus(t testing.TB) []Unsupported {
	t.Helper()
	return readCorpus(t, "unsupported", func(u *Unsupported) string {
		if len(u.Schema) == 0 || u.Keyword == "" {
			return "needs a schema and a keyword"
		}
		return ""
	}, func(u *Unsupported, name string) { u.Name = name })
}

// readCorpus reads every file of testdata/sub, in name order, into a T
// each: lacks says what a file is missing ("" when nothing), and name sets
// an entry's name (the file name without .json).
func readCorpus[T any](t testing.TB, sub string, lacks func(*T) string, name func(*T, string)) []T {
	t.Helper()
	dir := filepath.Join(testdata(), sub)
	var out []T
	for _, n := range corpusFiles(t, dir) {
		var f T
		readStrict(t, filepath.Join(dir, n), &f)
		if what := lacks(&f); what != "" {
			t.Fatalf("%s: %s", n, what)
		}
		name(&f, strings.TrimSuffix(n, ".json"))
		out = append(out, f)
	}
	return out
}

// SchemaURL is where Compile registers a schema; a pointer fragment
// appended to it names a subschema.
const SchemaURL = "https://corpus.cohort.invalid/schema.json"

// Compile compiles schema under draft 2020-12 with format assertions
// on, and returns the compiler too, so that subschemas (SchemaURL#/pointer)
// can be compiled from it.
func Compile(schema json.RawMessage) (*jsonschema.Compiler, *jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(SchemaURL, doc); err != nil {
		return nil, nil, err
	}
	sch, err := c.Compile(SchemaURL)
	if err != nil {
		return nil, nil, err
	}
	return c, sch, nil
}

// Validate validates one instance, given as bytes, against sch.
func Validate(sch *jsonschema.Schema, instance []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(instance))
	if err != nil {
		return fmt.Errorf("instance is not JSON: %w", err)
	}
	return sch.Validate(inst)
}

// validator compiles schema (draft 2020-12, format assertions on) and
// returns a function that validates an instance given as bytes.
func Validator(t testing.TB, schema json.RawMessage) func(instance []byte) error {
	t.Helper()
	_, sch, err := Compile(schema)
	if err != nil {
		t.Fatalf("compile schema: %v", err)
	}
	return func(instance []byte) error { return Validate(sch, instance) }
}
