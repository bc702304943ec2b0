//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"cohort/kernels"
)

// TestLinearAddRMSNorm: the GEMV whose last block adds the residual and
// normalizes gives what Linear and AddRMSNorm give (the norm's squares are
// summed in double in both, over blocks of different sizes, so the floats
// agree to rounding) for one decode row, for a split launch (long rows:
// several blocks a tile) and an unsplit one, several launches in a row (the
// launch counter resets itself), and falls back to the two ops for 2 and 8
// rows.
func TestLinearAddRMSNorm(t *testing.T) {
	defer func(v bool) { linearNorm = v }(linearNorm)
	linearNorm = true
	g := bf16Backend(t)
	r := newRand(23)
	for _, shape := range []struct{ K, N int }{{2560, 2560}, {9216, 2560}, {512, 96}, {512, 90}} {
		w := g.UploadWeight(roundBF16(randSlice(r, shape.N*shape.K, 0.05)), shape.N, shape.K)
		nw := g.Upload(randSlice(r, shape.N, 0.5), shape.N)
		for _, T := range []int{1, 2, 8} {
			t.Run(fmt.Sprintf("K%d/N%d/T%d", shape.K, shape.N, T), func(t *testing.T) {
				g := bf16Backend(t)
				for step := range 3 {
					x := g.Upload(randSlice(r, T*shape.K, 1), T, shape.K)
					res := g.Upload(randSlice(r, T*shape.N, 1), T, shape.N)
					gotSum, gotNorm := g.LinearAddRMSNorm(x, w, res, nw, 1e-6)
					wantSum, wantNorm := g.AddRMSNorm(res, g.Linear(x, w), nw, 1e-6)
					if d := relDiff(g.Download(gotSum), g.Download(wantSum)); d != 0 {
						t.Fatalf("step %d: sum differs (relative %.3g)", step, d)
					}
					if d := relDiff(g.Download(gotNorm), g.Download(wantNorm)); d > 1e-6 {
						t.Fatalf("step %d: normed differs (relative %.3g)", step, d)
					}
					g.ResetScratch()
				}
			})
		}
	}
	var _ kernels.LinearNorm = g
}
