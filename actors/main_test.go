package actors

import (
	"testing"

	"cohort/internal/leakcheck"
)

// TestMain fails the package's tests when they leave goroutines of ours
// running (see internal/leakcheck).
func TestMain(m *testing.M) { leakcheck.Main(m) }
