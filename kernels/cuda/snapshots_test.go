//go:build cuda

package cuda

import (
	"testing"

	"cohort/kernels"
	"cohort/kernels/kernelstest"
)

// TestSnapshots: the device pool keeps the SnapshotPool contract (at the
// 4b head shape, two layers).
func TestSnapshots(t *testing.T) {
	be := gpu(t)
	cfg := kernels.GDNConfig{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, ConvKernel: 4}
	p := be.NewStatePool(2, 3, cfg).(*StatePool)
	kernelstest.CheckSnapshots(t, p, p)
}
