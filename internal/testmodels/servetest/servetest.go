// Package servetest holds what the serving tests (actors, actors/remote,
// httpapi) share and cannot take from actors itself (the engine's own
// tests are inside package actors): a test checkpoint opened with its
// tokenizer and a one-rank reference copy of its model, a CPU backend
// factory, the tokens a request gets when run alone, the echo architecture
// (echo.go) and log capture.
package servetest

import (
	"bytes"
	"fmt"
	"log"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/sample"
	"cohort/model/tokenizer"
	"cohort/nccl"
)

// Model is a checkpoint ready to serve, with a single-rank copy of its model
// for reference runs.
type Model struct {
	Checkpoint *model.Checkpoint
	Tokenizer  *tokenizer.Tokenizer
	Backend    kernels.Backend
	Model      model.Model
	// preset is the modelgen preset the checkpoint was written from
	// (OpenPreset), "" for any other directory: Alone shares its results
	// between the copies of one preset.
	preset string
}

// Capacity is the serving tests' memory plan: 64 MiB of f32 state in pages
// of 16 positions, up to 64 sequences of 1024 tokens.
var Capacity = model.CapacityInput{Budget: 64 << 20, ElemBytes: 4, PageSize: 16, MaxSeqs: 64, MaxModelLen: 1024}

// OpenPreset writes the modelgen preset to a temporary directory and opens it.
func OpenPreset(t testing.TB, preset string) Model {
	t.Helper()
	m := OpenDir(t, archtest.WritePreset(t, preset))
	m.preset = preset
	return m
}

// OpenDir opens the checkpoint in dir with its tokenizer, and loads a
// single-rank copy of the model; the checkpoint is closed when the test ends.
func OpenDir(t testing.TB, dir string) Model {
	t.Helper()
	ck, tok := Open(t, dir)
	be, m := archtest.Load(t, ck)
	return Model{Checkpoint: ck, Tokenizer: tok, Backend: be, Model: m}
}

// Open opens the checkpoint in dir and its tokenizer; the checkpoint is
// closed when the test ends.
func Open(t testing.TB, dir string) (*model.Checkpoint, *tokenizer.Tokenizer) {
	t.Helper()
	ck := archtest.OpenDir(t, dir)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return ck, tok
}

// CPUBackends returns a backend factory (an actors.BackendFactory) of CPU
// ranks with threads threads each (0: all cores).
func CPUBackends(threads int) func(model.Shard, nccl.Communicator) (kernels.Backend, error) {
	return func(_ model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
		return cpu.New(cpu.Options{Comm: comm, Threads: threads}), nil
	}
}

// aloneMemo holds Alone's results for checkpoints written from a preset,
// by preset and request. A preset's weights come from fixed seeds, so
// every copy of it gives the same tokens: the tests of a package that ask
// for the same reference (TestChaos and TestFaultStorm share a workload,
// a request is checked at several TP degrees) compute it once, which
// matters most under the race detector.
var aloneMemo sync.Map // aloneKey → []int32

// aloneKey is what Alone's result depends on besides the weights (the
// backend's type included: a reference is never shared across backends).
func aloneKey(m Model, prompt []int32, p sample.Params, maxTokens int, ignoreEOS bool) string {
	return fmt.Sprintf("%s|%T|%v|%#v|%d|%v|%v", m.preset, m.Backend, prompt, p, maxTokens, ignoreEOS, m.Checkpoint.Config.EOS)
}

// Alone generates up to maxTokens tokens after prompt with a Session and
// the engine's sampling rule, stopping at EOS unless ignoreEOS: the
// reference for the tokens a request gets when it runs alone. Its penalty
// history is rebuilt from the whole sequence for every token. For a
// preset's checkpoint the result is computed once per process (aloneMemo).
func Alone(t testing.TB, m Model, prompt []int32, p sample.Params, maxTokens int, ignoreEOS bool) []int32 {
	t.Helper()
	if m.preset == "" {
		return alone(t, m, prompt, p, maxTokens, ignoreEOS)
	}
	key := aloneKey(m, prompt, p, maxTokens, ignoreEOS)
	if out, ok := aloneMemo.Load(key); ok {
		return slices.Clone(out.([]int32))
	}
	out := alone(t, m, prompt, p, maxTokens, ignoreEOS)
	aloneMemo.Store(key, slices.Clone(out))
	return out
}

func alone(t testing.TB, m Model, prompt []int32, p sample.Params, maxTokens int, ignoreEOS bool) []int32 {
	t.Helper()
	s := model.NewSession(m.Backend, m.Model, len(prompt)+maxTokens)
	logits, err := s.Step(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for i := range maxTokens {
		id := sample.PickWithHistory(logits, p, i, 0, sample.NewHistory(prompt, out), nil).Token.ID
		out = append(out, id)
		if (!ignoreEOS && slices.Contains(m.Checkpoint.Config.EOS, id)) || i+1 == maxTokens {
			break
		}
		if logits, err = s.Step([]int32{id}, false); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// CaptureLog sends the standard logger to a buffer until the test ends.
func CaptureLog(t testing.TB) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	saved := log.Writer()
	log.SetOutput(&buf)
	t.Cleanup(func() { log.SetOutput(saved) })
	return &buf
}
