package qwen3_test

import (
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/kernels/cpu"
	"cohort/model"
)

// openTiny writes the qwen3-tiny preset and opens it.
func openTiny(t testing.TB) *model.Checkpoint { return archtest.Open(t, "qwen3-tiny") }

// tinyModel loads the qwen3-tiny preset on one CPU rank.
func tinyModel(t testing.TB) (*cpu.Backend, model.Model, *model.Config) {
	t.Helper()
	ck := openTiny(t)
	be, m := archtest.Load(t, ck)
	return be, m, ck.Config
}
