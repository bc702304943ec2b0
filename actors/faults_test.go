package actors

import "testing"

// TestFaultSkip: an error fault with Skip lets that many of the rank's
// steps pass, fails the next one, and then none.
func TestFaultSkip(t *testing.T) {
	for _, skip := range []int{0, 1, 3} {
		var f rankFaults
		f.arm(Fault{Kind: FaultError, Skip: skip})
		var got []bool
		for range skip + 3 {
			got = append(got, f.beforeStep() != nil)
		}
		for i, failed := range got {
			if want := i == skip; failed != want {
				t.Errorf("skip %d: step %d failed %v, want %v (all %v)", skip, i, failed, want, got)
			}
		}
	}
}
