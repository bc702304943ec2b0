//go:build cuda

package cuda

import (
	"fmt"
	"strings"
	"testing"
)

// TestGEMVOccupancy logs, for each tensor-core GEMV entry, the blocks per
// SM the driver reports at 4, 8 and 16 warps (what a launch plan can count
// on), and fails if an entry cannot hold one block of 4 warps.
func TestGEMVOccupancy(t *testing.T) {
	g := bf16Backend(t)
	for _, name := range kernelNames {
		if len(name) < 8 || name[:8] != "gemv_mma" {
			continue
		}
		var occ []string
		for _, w := range []int{4, 8, 16} {
			if strings.Contains(name, "_o") && w > 4 {
				continue
			}
			n, err := g.funcs[name].MaxActiveBlocksPerMultiProcessor(32*w, 0)
			if err != nil {
				t.Fatalf("%s: occupancy at %d warps: %v", name, w, err)
			}
			if w == 4 && n < 1 {
				t.Errorf("%s holds no block of 4 warps", name)
			}
			occ = append(occ, fmt.Sprintf("w%d: %d blocks/SM", w, n))
		}
		t.Logf("%s: %v", name, occ)
	}
}
