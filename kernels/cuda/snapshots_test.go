//go:build cuda

package cuda

import (
	"testing"

	"cohort/kernels"
	"cohort/kernels/kernelstest"
)

// TestSnapshots: the device pool keeps the SnapshotPool contract (at the
// 4b head shape, two layers), with either recurrent state: a bf16 pool's
// places hold 2-byte recurrent elements (bf16SnapshotPool checks the size)
// and its state round-trips bit for bit once rounded (bf16SnapshotIO).
func TestSnapshots(t *testing.T) {
	forGDNStates(t, func(t *testing.T, bf16 bool) {
		be := gpu(t)
		cfg := kernels.GDNConfig{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, ConvKernel: 4}
		p := be.NewStatePool(2, 3, cfg).(*StatePool)
		defer be.FreeStatePool(p)
		if !bf16 {
			kernelstest.CheckSnapshots(t, p, p)
			return
		}
		kernelstest.CheckSnapshots(t, bf16SnapshotPool{p, t}, bf16SnapshotIO{p})
	})
}
