package planner

import (
	"errors"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func testConfig() Config {
	return Config{MaxPrefillTokens: 8, MaxRows: 4, Slots: 2, KVPages: 8, PageSize: 4, MaxModelLen: 32}
}

func TestConfigValidate(t *testing.T) {
	if err := testConfig().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		mutate func(*Config)
		field  string
	}{
		{func(c *Config) { c.MaxPrefillTokens = 0 }, "MaxPrefillTokens"},
		{func(c *Config) { c.MaxRows = -1 }, "MaxRows"},
		{func(c *Config) { c.Slots = 0 }, "Slots"},
		{func(c *Config) { c.KVPages = maxField + 1 }, "KVPages"},
		{func(c *Config) { c.PageSize = 0 }, "PageSize"},
		{func(c *Config) { c.MaxModelLen = 0 }, "MaxModelLen"},
	} {
		cfg := testConfig()
		tc.mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "planner: ") || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate = %v", tc.field, err)
		}
		if p, err := New(cfg); p != nil || err == nil {
			t.Errorf("%s: New accepted an invalid config", tc.field)
		}
	}
}

func TestRejectionIsTyped(t *testing.T) {
	p, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	err = p.Add(Request{ID: 9, PromptLen: 30, MaxNewTokens: 10})
	var rej *Rejection
	if !errors.As(err, &rej) || !errors.Is(err, ErrRejected) {
		t.Fatalf("Add = %v (%T), want *Rejection", err, err)
	}
	if rej.ID != 9 || rej.Reason != ReasonContextLength || !strings.Contains(rej.Msg, "32") {
		t.Errorf("rejection = %+v", rej)
	}
	if !strings.Contains(err.Error(), "planner: request 9") {
		t.Errorf("Error() = %q", err.Error())
	}
	// An overflowing request is a context-length rejection, not a wrap-around.
	err = p.Add(Request{ID: 10, PromptLen: 5, MaxNewTokens: int(^uint(0) >> 1)})
	if !errors.As(err, &rej) || rej.Reason != ReasonContextLength {
		t.Errorf("huge max tokens: %v", err)
	}
}

// TestUpdateAppliesOnlyTheLatestPlanOnce: a stale or repeated Update is a
// no-op, so a step reply that arrives twice cannot advance a request twice.
func TestUpdateAppliesOnlyTheLatestPlanOnce(t *testing.T) {
	p, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Add(Request{ID: 1, PromptLen: 4, MaxNewTokens: 3}); err != nil {
		t.Fatal(err)
	}
	first := p.Schedule()
	p.Update(first, []RequestID{1})
	p.Update(first, []RequestID{1}) // again: ignored
	second := p.Schedule()
	if got := second.Seqs[0]; got.Cached != 4 || got.Len != 1 || !got.Sample {
		t.Fatalf("second plan %v", second)
	}
	p.Update(first, []RequestID{1}) // stale: ignored
	p.Update(Plan{Step: 99}, []RequestID{1})
	p.Update(second, []RequestID{1})
	third := p.Schedule()
	if got := third.Seqs[0]; got.Cached != 5 {
		t.Fatalf("third plan %v", third)
	}
	p.Update(third, []RequestID{1, 1, 7})
	if fourth := p.Schedule(); len(fourth.Seqs) != 1 || fourth.Seqs[0].Cached != 6 {
		t.Fatalf("fourth plan %v: the third update counted more than one token", fourth)
	}
	if !p.Finish(1) {
		t.Fatal("a running request is not known")
	}
	if p.Finish(1) || p.Abort(1) {
		t.Error("a finished request is still known")
	}
	if st := p.Stats(); st.Running != 0 || st.UsedPages != 0 || st.FreeSlots != 2 {
		t.Errorf("stats after finish: %v", st)
	}
	if idle := p.Schedule(); len(idle.Seqs) != 0 || idle.String() != "idle" {
		t.Errorf("idle plan = %v", idle)
	}
}

// TestUpdateSampledAnyOrder: Update counts a token for each Sample seq
// whose id is in sampled, whatever the order of the ids and whether some
// name no seq (the scheduler lists them in plan order; Update matches
// those without a lookup).
func TestUpdateSampledAnyOrder(t *testing.T) {
	for _, tc := range []struct {
		sampled []RequestID
		next    []RequestID // decoding next: those that got their token
	}{
		{[]RequestID{1, 2}, []RequestID{1, 2}},
		{[]RequestID{2, 1}, []RequestID{1, 2}},
		{[]RequestID{2}, []RequestID{2}},
		{[]RequestID{1}, []RequestID{1}},
		{[]RequestID{9, 2}, []RequestID{2}},
		{[]RequestID{1, 9}, []RequestID{1}},
		{[]RequestID{2, 2}, []RequestID{2}},
		{nil, nil},
	} {
		p, err := New(testConfig())
		if err != nil {
			t.Fatal(err)
		}
		for id := RequestID(1); id <= 2; id++ {
			if err := p.Add(Request{ID: id, PromptLen: 4, MaxNewTokens: 3}); err != nil {
				t.Fatal(err)
			}
		}
		p.Update(p.Schedule(), []RequestID{1, 2}) // prefilled, a token each
		p.Update(p.Schedule(), tc.sampled)        // a decode row each
		// A request left without its token is not scheduled (TestSampledWithoutToken).
		var next []RequestID
		for _, s := range p.Schedule().Seqs {
			if s.Cached != 5 || s.Len != 1 {
				t.Fatalf("sampled %v: next plan has %+v", tc.sampled, s)
			}
			next = append(next, s.ID)
		}
		if !slices.Equal(next, tc.next) {
			t.Errorf("sampled %v: next plan decodes %v, want %v", tc.sampled, next, tc.next)
		}
	}
}

// TestSampledWithoutToken: a Sample seq left out of sampled is not
// recomputed (a recurrent state cannot take the same token twice); it waits
// for the caller to finish, abort or requeue it.
func TestSampledWithoutToken(t *testing.T) {
	p, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Add(Request{ID: 1, PromptLen: 4, MaxNewTokens: 3}); err != nil {
		t.Fatal(err)
	}
	p.Update(p.Schedule(), nil)
	if plan := p.Schedule(); len(plan.Seqs) != 0 {
		t.Fatalf("request without its token was scheduled: %v", plan)
	}
	p.Requeue(1)
	plan := p.Schedule()
	if len(plan.Seqs) != 1 || plan.Seqs[0].Cached != 0 || plan.Seqs[0].Len != 4 || !plan.Seqs[0].Sample {
		t.Fatalf("requeued request: %v", plan)
	}
}

func TestScheduleWithinBudget(t *testing.T) {
	cases := []struct {
		name   string
		budget int
		want   []int // prefill chunk lengths of the successive plans
	}{
		{"config budget", 100, []int{8, 8, 4}},
		{"smaller", 3, []int{3, 3, 3, 3, 3, 3, 2}},
		{"zero means one token", 0, slices.Repeat([]int{1}, 20)},
		{"negative means one token", -5, slices.Repeat([]int{1}, 20)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxModelLen, cfg.KVPages = 64, 16
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Add(Request{ID: 1, PromptLen: 20, MaxNewTokens: 1}); err != nil {
				t.Fatal(err)
			}
			var got []int
			for {
				plan := p.ScheduleWithin(c.budget)
				if len(plan.Seqs) == 0 {
					break
				}
				got = append(got, plan.Seqs[0].Len)
				if plan.Seqs[0].Sample {
					break
				}
				p.Update(plan, nil)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("chunks %v, want %v", got, c.want)
			}
		})
	}
}

func TestLowestFreeFirst(t *testing.T) {
	var h minHeap[int32]
	for _, v := range []int32{5, 3, 9, 0, 7, 3, 1} {
		h.push(v)
	}
	var got []int32
	for len(h) > 0 {
		got = append(got, h.pop())
	}
	if want := []int32{0, 1, 3, 3, 5, 7, 9}; !slices.Equal(got, want) {
		t.Errorf("heap order %v, want %v", got, want)
	}
}

// TestPurity enforces the package rules on its non-test files: only the
// allowed imports (the standard library's pure ones and the prefix index), fmt only for Errorf, no goroutines, channels or select,
// and no range over a map.
func TestPurity(t *testing.T) {
	allowed := map[string]bool{"errors": true, "fmt": true, "slices": true, "sort": true, "strings": true, "strconv": true,
		"cohort/actors/prefix": true} // the cache's index: pure, standard library only
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); !allowed[p] {
				t.Errorf("%s imports %q", path, p)
			}
		}
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check("cohort/actors/planner", fset, files, info); err != nil {
		t.Fatalf("type check: %v", err)
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			bad := ""
			switch n := n.(type) {
			case *ast.GoStmt:
				bad = "go statement"
			case *ast.ChanType, *ast.SendStmt, *ast.SelectStmt:
				bad = "channel"
			case *ast.RangeStmt:
				if _, ok := info.Types[n.X].Type.Underlying().(*types.Map); ok {
					bad = "range over a map"
				}
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok {
					if pkg, ok := info.Uses[id].(*types.PkgName); ok && pkg.Imported().Path() == "fmt" && n.Sel.Name != "Errorf" {
						bad = "fmt." + n.Sel.Name
					}
				}
			}
			if bad != "" {
				t.Errorf("%s: %s", fset.Position(n.Pos()), bad)
			}
			return true
		})
	}
}
