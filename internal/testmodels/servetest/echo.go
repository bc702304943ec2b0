package servetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/kernels"
	"cohort/model"
	"cohort/model/qwen35"
)

// EchoArchitecture is the name of the echo architecture in config.json.
const EchoArchitecture = "CohortEchoForBenchmarks"

// echoArch is Qwen3.5's weight declaration with a forward pass that does no
// compute: it returns constant logits. Serving it measures what the actors,
// the planner and the messages cost per step.
type echoArch struct{ qwen35.Arch }

type echoModel struct{ vocab int }

// echoState is the echo model's state: there is none to keep.
type echoState struct{}

func (echoState) Reset(int) {}

func init() { model.MustRegister(EchoArchitecture, echoArch{}) }

func (echoArch) Build(c *model.Config, _ model.Shard, _ map[string]kernels.Tensor) (model.Model, error) {
	return &echoModel{vocab: c.VocabSize}, nil
}

func (m *echoModel) NewState(kernels.Backend, int, int, int) model.State { return echoState{} }

func (m *echoModel) Forward(be kernels.Backend, _ model.State, _ []int32, _ *kernels.Batch, rows []int) (kernels.Tensor, error) {
	logits := make([]float32, len(rows)*m.vocab)
	for i := range rows {
		logits[i*m.vocab+(i%m.vocab)] = 5
	}
	return be.Upload(logits, len(rows), m.vocab), nil
}

// OpenEcho writes the tiny preset, switches its architecture to echo and
// opens it.
func OpenEcho(t testing.TB) Model {
	t.Helper()
	dir := archtest.WritePreset(t, "tiny")
	cfgPath := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), "Qwen3_5ForConditionalGeneration", EchoArchitecture, 1)
	if err := os.WriteFile(cfgPath, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	return OpenDir(t, dir)
}
