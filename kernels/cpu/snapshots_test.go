package cpu

import (
	"testing"

	"cohort/kernels"
	"cohort/kernels/kernelstest"
)

func TestSnapshots(t *testing.T) {
	cfg := kernels.GDNConfig{KeyHeads: 1, ValueHeads: 2, KeyDim: 4, ValueDim: 3, ConvKernel: 4}
	p := New(Options{}).NewStatePool(2, 3, cfg).(*StatePool)
	kernelstest.CheckSnapshots(t, p, p)
	defer func() {
		if recover() == nil {
			t.Error("a save to a place beyond the allocation did not panic")
		}
	}()
	p.Save(0, 2)
}
