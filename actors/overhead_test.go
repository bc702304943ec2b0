package actors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cohort/kernels"
	"cohort/model"
	"cohort/model/qwen35"
)

// echoArch is Qwen3.5's weight declaration with a forward pass that does no
// compute: it returns constant logits. Serving it measures what the actors,
// the planner and the messages cost per step.
type echoArch struct{ qwen35.Arch }

type echoModel struct{ vocab int }

// echoState is the echo model's state: there is none to keep.
type echoState struct{}

func (echoState) Reset(int) {}

func init() { model.MustRegister("CohortEchoForBenchmarks", echoArch{}) }

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

// openEcho writes the tiny preset and switches its architecture to echo.
func openEcho(t testing.TB) testModel {
	t.Helper()
	tm := openPreset(t, "tiny")
	dir := tm.ck.Dir
	cfgPath := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), "Qwen3_5ForConditionalGeneration", "CohortEchoForBenchmarks", 1)
	if err := os.WriteFile(cfgPath, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	return openDir(t, dir)
}
