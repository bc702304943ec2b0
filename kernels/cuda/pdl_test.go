package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestKernelsWaitForPredecessor: the backend launches every kernel with
// programmatic dependent launch on sm_90, so a kernel may start before the
// one before it has finished. Each must therefore wait for it
// (PDL_WAIT, see kernels/00_common.cu), in its own body or in a device
// function it calls. This reads the kernel sources, so it runs without a
// GPU.
func TestKernelsWaitForPredecessor(t *testing.T) {
	s := kernelSources(t)
	waits := map[string]bool{} // device functions that wait, transitively
	devices := functions(s, regexp.MustCompile(`__device__[^;{]*?\b(\w+)\s*\(`))
	for changed := true; changed; {
		changed = false
		for name, body := range devices {
			if !waits[name] && callsWait(body, waits) {
				waits[name], changed = true, true
			}
		}
	}
	kernels := functions(s, regexp.MustCompile(`extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\s*\(`))
	if len(kernels) < 20 {
		t.Fatalf("found only %d kernels: is the pattern stale?", len(kernels))
	}
	for name, body := range kernels {
		if !callsWait(body, waits) {
			t.Errorf("kernel %s never calls PDL_WAIT (directly or through a device function)", name)
		}
	}
}

// TestKernelNamesListEveryEntry: the backend looks up only kernelNames and
// collectiveKernels in the compiled module, so an entry missing from them
// cannot be launched. (The GEMV entries are made by macros, which the
// pattern does not see; TestCompileKernels loads every listed name.)
func TestKernelNamesListEveryEntry(t *testing.T) {
	s := kernelSources(t)
	entries := functions(s, regexp.MustCompile(`extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\s*\(`))
	listed := map[string]bool{}
	for _, n := range append(slices.Clone(kernelNames), collectiveKernels...) {
		listed[n] = true
	}
	for n := range entries {
		if !listed[n] && !strings.HasPrefix(n, "__") { // a macro's entry (name##...)
			t.Errorf("kernel %s is not in kernelNames", n)
		}
	}
}

// kernelSources returns kernels/*.cu concatenated.
func kernelSources(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob("kernels/*.cu")
	if err != nil || len(files) == 0 {
		t.Fatalf("no kernel sources: %v", err)
	}
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	return src.String()
}

// functions returns the body (from its opening brace to the matching
// closing one) of every function whose head matches re, by the name in
// re's first group.
func functions(s string, re *regexp.Regexp) map[string]string {
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
		name := s[m[2]:m[3]]
		open := strings.IndexAny(s[m[1]:], "{;")
		if open < 0 || s[m[1]+open] == ';' {
			continue // a declaration
		}
		start, depth := m[1]+open, 0
		for i := start; i < len(s); i++ {
			switch s[i] {
			case '{':
				depth++
			case '}':
				depth--
			}
			if depth == 0 {
				out[name] += s[start : i+1]
				break
			}
		}
	}
	return out
}

func callsWait(body string, waits map[string]bool) bool {
	if strings.Contains(body, "PDL_WAIT()") {
		return true
	}
	for name := range waits {
		if regexp.MustCompile(`\b` + name + `\s*(<[^>]*>)?\s*\(`).MatchString(body) {
			return true
		}
	}
	return false
}
