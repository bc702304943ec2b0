// Package leakcheck finds goroutines that tests leave running. A test binary
// calls Main from its TestMain (every test, then the check), or a test calls
// Check (the check at its cleanup). A goroutine counts when it was not
// running at the start and its stack has a frame, or its creator, in this
// module (cohort/...): what our code started, or a library goroutine stuck in
// a callback of ours. Goroutines only of the runtime, the testing package
// or a library's own housekeeping are not ours to judge.
//
// Goroutines end asynchronously (a stopped actor's mailbox drains, a closed
// connection's reader returns), so the check polls for them to end, up to
// an explicit deadline: it passes as soon as none is left, and fails only
// at the deadline.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Timeout is how long the check waits for goroutines to end.
var Timeout = 10 * time.Second

// module prefixes the frames of our code.
const module = "cohort/"

// goroutine is one goroutine of a stack dump.
type goroutine struct {
	id    int
	stack string
}

// snapshot returns every goroutine but the calling one.
func snapshot() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for i, block := range strings.Split(string(buf), "\n\n") {
		if i == 0 {
			continue // the calling goroutine comes first
		}
		if g, ok := parse(block); ok {
			out = append(out, g)
		}
	}
	return out
}

// parse reads one goroutine's block ("goroutine 7 [chan receive]:\n...").
func parse(block string) (goroutine, bool) {
	head, _, _ := strings.Cut(block, "\n")
	rest, ok := strings.CutPrefix(head, "goroutine ")
	if !ok {
		return goroutine{}, false
	}
	idStr, _, _ := strings.Cut(rest, " ")
	id, err := strconv.Atoi(idStr)
	if err != nil {
		return goroutine{}, false
	}
	return goroutine{id: id, stack: block}, true
}

// ours reports whether a goroutine's stack, or its creator, names code of
// this module.
func ours(stack string) bool {
	for _, line := range strings.Split(stack, "\n") {
		line = strings.TrimPrefix(line, "created by ")
		if strings.HasPrefix(line, module) {
			return true
		}
	}
	return false
}

// runner reports whether a goroutine is a test's own (testing.tRunner):
// parallel or finished tests are the testing package's business.
func runner(stack string) bool {
	return strings.Contains(stack, "testing.tRunner(") || strings.Contains(stack, "testing.(*M).")
}

// ids returns the ids of goroutines.
func ids(gs []goroutine) []int {
	out := make([]int, len(gs))
	for i, g := range gs {
		out[i] = g.id
	}
	return out
}

// leaked returns the goroutines of ours that are not in before, waiting up
// to timeout for them to end.
func leaked(before []int, timeout time.Duration) []goroutine {
	deadline := time.After(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var left []goroutine
		for _, g := range snapshot() {
			if !slices.Contains(before, g.id) && ours(g.stack) && !runner(g.stack) {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-deadline:
			return left
		case <-tick.C:
		}
	}
}

func report(left []goroutine, waited time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "leakcheck: %d goroutine(s) of ours still running after %v:\n", len(left), waited)
	for _, g := range left {
		b.WriteString("\n" + g.stack + "\n")
	}
	return b.String()
}

// Main runs a test binary's tests (m.Run) and then fails it if goroutines
// of ours that were not running before remain; use it as
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
//
// It exits the process with the tests' status (1 when only the check
// failed).
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain that does more: it returns
// the status to exit with.
func Run(m *testing.M) int {
	before := ids(snapshot())
	code := m.Run()
	if code != 0 {
		return code
	}
	if left := leaked(before, Timeout); len(left) > 0 {
		fmt.Fprint(os.Stderr, report(left, Timeout))
		return 1
	}
	return 0
}

// Check fails t if, at its cleanup, goroutines of ours that were not
// running when Check was called remain. Do not use it in parallel tests.
func Check(t testing.TB) {
	t.Helper()
	before := ids(snapshot())
	t.Cleanup(func() {
		if left := leaked(before, Timeout); len(left) > 0 {
			t.Error(report(left, Timeout))
		}
	})
}
