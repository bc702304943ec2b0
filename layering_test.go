// Package cohort_test enforces the layering rules of docs/architecture.md
// over the real import graph (go list -deps).
package cohort_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "cohort"

type pkgInfo struct {
	ImportPath string
	Deps       []string // transitive
	Imports    []string // direct
	CgoFiles   []string
	Doc        string // the package comment's first sentence
	GoFiles    []string
}

func listPackages(t *testing.T, tags string) []pkgInfo {
	t.Helper()
	args := []string{"list", "-deps=false", "-json=ImportPath,Deps,Imports,CgoFiles,Doc,GoFiles"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, "./...")...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkgInfo
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkgInfo
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// under reports whether path is pkg or one of its sub-packages.
func under(path, pkg string) bool {
	full := module + "/" + pkg
	return path == full || strings.HasPrefix(path, full+"/")
}

// rule forbids packages under `from` to depend on anything `forbidden` matches.
type rule struct {
	from      string
	forbidden func(dep string) bool
	why       string
	direct    bool   // check direct imports only (the dep may come in through an allowed package)
	except    string // a sub-package of from that the rule does not cover ("" for none)
}

func ours(pkgs ...string) func(string) bool {
	return func(dep string) bool {
		for _, p := range pkgs {
			if under(dep, p) {
				return true
			}
		}
		return false
	}
}

func anyOurs(except ...string) func(string) bool {
	return func(dep string) bool {
		if !strings.HasPrefix(dep, module+"/") {
			return false
		}
		for _, e := range except {
			if under(dep, e) {
				return false
			}
		}
		return true
	}
}

var rules = []rule{
	{from: "model", forbidden: ours("actors", "httpapi", "supervision", "cmd"), why: "model never imports actors or httpapi", direct: false},
	{from: "kernels", forbidden: ours("model", "actors", "httpapi", "supervision", "cmd"), why: "kernels never imports model", direct: false},
	{from: "nccl", forbidden: anyOurs("nccl"), why: "nccl imports nothing of ours", direct: false},
	{from: "supervision", forbidden: anyOurs("supervision", "nccl"), why: "supervision may import only nccl", direct: false},
	{from: "actors", forbidden: ours("httpapi", "cmd"), why: "actors never import the edge or the CLI", direct: false},
	{from: "httpapi", forbidden: ours("kernels", "nccl", "supervision", "cmd"), why: "httpapi reaches the engine only through actors", direct: true},
	{from: "model/sample", forbidden: anyOurs("model/sample"), why: "sampling is a leaf: pure and deterministic", direct: false},
	{from: "model/grammar", forbidden: anyOurs("model/grammar", "model/sample"), why: "constrained decoding is a library over bytes and masks: it imports only model/sample", direct: false},
	{from: "actors/remote/rankpb", forbidden: anyOurs("actors/remote/rankpb"), why: "the wire messages of remote ranks are generated protobuf: they import nothing of ours", direct: false},
	{from: "actors", forbidden: ours("actors/remote"), why: "actors never imports actors/remote: remote implements actors.Placer and cmd/cohort wires the two", direct: false, except: "actors/remote"},
	{from: "actors/planner", forbidden: notStdBut("actors/prefix"), why: "the planner is pure: standard library only, and the prefix cache's index, pure too (no protoactor, kernels or I/O packages of ours)", direct: false},
	{from: "actors/prefix", forbidden: notStd, why: "the prefix index is pure like the planner: standard library only", direct: false},
	{from: "nccl/dynload", forbidden: notStd, why: "the shared library loader is a leaf: standard library only", direct: false},
	{from: "model/qwen35", forbidden: archImport, why: "an architecture imports only model and kernels (no other architecture)", direct: true},
	{from: "model/qwen3", forbidden: archImport, why: "an architecture imports only model and kernels (no other architecture)", direct: true},
}

// devOnly lists the packages of ours that serve tests, benchmarks and the
// CLI's make-model only: no production package but cmd/cohort may import them
// (test files may: go list's Deps leave tests out).
var devOnly = []string{"internal/testmodels", "internal/leakcheck", "internal/golden", "internal/pieces"}

// production lists the packages that are not dev-only and not the CLI, the
// packages that devOnly keeps out.
var production = []string{"actors", "httpapi", "supervision", "model", "kernels", "nccl"}

func init() {
	for _, p := range production {
		rules = append(rules, rule{from: p, forbidden: ours(devOnly...), why: "dev-only helpers (internal/testmodels, internal/leakcheck, internal/golden, internal/pieces) stay out of production packages", direct: false})
	}
}

// archImport matches what an architecture package may not import: any
// package of ours but model and kernels themselves.
func archImport(dep string) bool {
	return strings.HasPrefix(dep, module+"/") && dep != module+"/model" && dep != module+"/kernels"
}

// violates reports whether pkg importing dep breaks r. A package may import
// its own sub-packages, except the one r carves out (except).
func (r rule) violates(pkg, dep string) bool {
	carved := func(p string) bool { return r.except != "" && under(p, r.except) }
	if !under(pkg, r.from) || carved(pkg) || !r.forbidden(dep) {
		return false
	}
	return !under(dep, r.from) || carved(dep)
}

// notStd matches every package outside the standard library.
func notStd(dep string) bool {
	first, _, _ := strings.Cut(dep, "/")
	return strings.Contains(first, ".") || dep == module || strings.HasPrefix(dep, module+"/")
}

// notStdBut is notStd except for the packages of ours named.
func notStdBut(allowed ...string) func(string) bool {
	return func(dep string) bool {
		for _, a := range allowed {
			if under(dep, a) {
				return false
			}
		}
		return notStd(dep)
	}
}

func TestLayering(t *testing.T) {
	for _, tags := range []string{"", "cuda"} {
		for _, p := range listPackages(t, tags) {
			for _, r := range rules {
				deps := p.Deps
				if r.direct {
					deps = p.Imports
				}
				for _, d := range deps {
					if r.violates(p.ImportPath, d) {
						t.Errorf("tags=%q: %s imports %s: %s", tags, p.ImportPath, d, r.why)
					}
				}
			}
		}
	}
}

// TestCgoConfined checks that only kernels/cuda and nccl contain import "C".
func TestCgoConfined(t *testing.T) {
	for _, tags := range []string{"", "cuda"} {
		for _, p := range listPackages(t, tags) {
			if len(p.CgoFiles) > 0 && !under(p.ImportPath, "kernels/cuda") && !under(p.ImportPath, "nccl") {
				t.Errorf("tags=%q: %s has cgo files %v; only kernels/cuda and nccl may", tags, p.ImportPath, p.CgoFiles)
			}
		}
	}
}

// TestOneLoader checks that nccl/dynload is the only code that calls dlopen:
// every versioned CUDA library (NVRTC, cuBLASLt, NCCL) is found through its
// one search list, environment override and error.
func TestOneLoader(t *testing.T) {
	call := "dl" + "open(" // split so that this file does not match itself
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasPrefix(filepath.ToSlash(path), "nccl/dynload/") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(src), call) {
			t.Errorf("%s calls dlopen; open shared libraries with nccl/dynload", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRulesBite proves the checker flags violations (and lets an allowed
// import pass), so a passing TestLayering means something.
func TestRulesBite(t *testing.T) {
	for _, c := range []struct {
		from, dep string
		flagged   bool
	}{
		{"kernels/cpu", "model", true},
		{"actors", "actors/remote", true},
		{"actors/planner", "actors/remote", true},
		{"actors/remote", "actors", false},
		{"cmd/cohort", "actors/remote", false},
		{"model", "internal/testmodels/modelgen", true},
		{"httpapi", "internal/leakcheck", true},
		{"cmd/cohort", "internal/testmodels/modelgen", false},
	} {
		hit := false
		for _, r := range rules {
			if r.violates(module+"/"+c.from, module+"/"+c.dep) {
				hit = true
			}
		}
		if hit != c.flagged {
			t.Errorf("%s -> %s: flagged %v, want %v", c.from, c.dep, hit, c.flagged)
		}
	}
}

// TestEveryPackageHasDoc: every package with Go files (in the default build
// and with -tags cuda) says what it is in a package comment that starts
// "Package <name>" (or "Command" for a main package).
func TestEveryPackageHasDoc(t *testing.T) {
	for _, tags := range []string{"", "cuda"} {
		for _, p := range listPackages(t, tags) {
			if len(p.GoFiles)+len(p.CgoFiles) == 0 {
				continue // tests only
			}
			if !strings.HasPrefix(p.Doc, "Package ") && !strings.HasPrefix(p.Doc, "Command ") {
				t.Errorf("%s (tags %q): package comment %q does not start with \"Package\" or \"Command\"", p.ImportPath, tags, p.Doc)
			}
		}
	}
}
