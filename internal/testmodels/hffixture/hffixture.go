// Package hffixture reads the Hugging Face reference fixtures that
// tools/hfref/make_fixtures.py writes (testdata/hf/<name>/): the checkpoint,
// ref.json (prompts, greedy continuations, provenance) and ref.safetensors
// (the logits of every prompt position). Tests of every backend use it.
package hffixture

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"cohort/model/safetensors"
)

// Fixture is one reference fixture directory.
type Fixture struct {
	Dir          string
	Name         string
	Prompts      map[int][]int32 // prompt length -> token ids
	Greedy       map[int][]int32 // prompt length -> HF's greedy continuation
	Transformers string          // transformers version that made it
	GDNPath      string          // which GDN implementation HF ran

	logits *safetensors.File
}

type refJSON struct {
	Fixture      string             `json:"fixture"`
	Prompts      map[string][]int32 `json:"prompts"`
	Greedy       map[string][]int32 `json:"greedy"`
	Transformers string             `json:"transformers"`
	GDNPath      string             `json:"gdn_path"`
}

// Find returns the fixture directories under root (those with a ref.json).
func Find(root string) ([]string, error) {
	refs, err := filepath.Glob(filepath.Join(root, "*", "ref.json"))
	if err != nil {
		return nil, fmt.Errorf("hffixture: %w", err)
	}
	dirs := make([]string, len(refs))
	for i, r := range refs {
		dirs[i] = filepath.Dir(r)
	}
	sort.Strings(dirs)
	return dirs, nil
}

// Open reads a fixture's references; Close releases the logits file.
func Open(dir string) (*Fixture, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "ref.json"))
	if err != nil {
		return nil, fmt.Errorf("hffixture: %w", err)
	}
	var r refJSON
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("hffixture: %s: %w", dir, err)
	}
	f := &Fixture{Dir: dir, Name: filepath.Base(dir), Transformers: r.Transformers, GDNPath: r.GDNPath}
	if f.Prompts, err = byLength(r.Prompts); err != nil {
		return nil, fmt.Errorf("hffixture: %s: prompts: %w", dir, err)
	}
	if f.Greedy, err = byLength(r.Greedy); err != nil {
		return nil, fmt.Errorf("hffixture: %s: greedy: %w", dir, err)
	}
	if f.logits, err = safetensors.Open(filepath.Join(dir, "ref.safetensors")); err != nil {
		return nil, fmt.Errorf("hffixture: %w", err)
	}
	return f, nil
}

func byLength(m map[string][]int32) (map[int][]int32, error) {
	out := make(map[int][]int32, len(m))
	for k, v := range m {
		n, err := strconv.Atoi(k)
		if err != nil {
			return nil, fmt.Errorf("key %q is not a prompt length", k)
		}
		out[n] = v
	}
	return out, nil
}

// Lengths returns the prompt lengths, ascending.
func (f *Fixture) Lengths() []int {
	lens := make([]int, 0, len(f.Prompts))
	for n := range f.Prompts {
		lens = append(lens, n)
	}
	sort.Ints(lens)
	return lens
}

// Logits returns HF's logits [n, vocab] for the prompt of length n.
func (f *Fixture) Logits(n int) ([]float32, error) {
	t, ok := f.logits.Tensor(fmt.Sprintf("logits.%d", n))
	if !ok {
		return nil, fmt.Errorf("hffixture: %s has no logits.%d", f.Name, n)
	}
	return t.Float32()
}

// Close releases the fixture's files.
func (f *Fixture) Close() error { return f.logits.Close() }

// OpenAll opens every fixture under root for a test, failing it when fewer
// than min are found; the fixtures are closed when the test ends.
func OpenAll(t testing.TB, root string, min int) []*Fixture {
	t.Helper()
	dirs, err := Find(root)
	if err != nil || len(dirs) < min {
		t.Fatalf("want at least %d HF fixtures under %s, found %d (%v); regenerate them with `make fixtures` on the GPU machine", min, root, len(dirs), err)
	}
	out := make([]*Fixture, 0, len(dirs))
	for _, d := range dirs {
		f, err := Open(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		out = append(out, f)
	}
	return out
}

// LogitError returns max |got − want| and the standard deviation of want:
// the fixtures' tolerance is stated relative to that spread.
func LogitError(got, want []float32) (maxDiff, std float64) {
	var sum, sq float64
	for i := range want {
		sum += float64(want[i])
		sq += float64(want[i]) * float64(want[i])
		maxDiff = math.Max(maxDiff, math.Abs(float64(got[i]-want[i])))
	}
	mean := sum / float64(len(want))
	return maxDiff, math.Sqrt(sq/float64(len(want)) - mean*mean)
}
