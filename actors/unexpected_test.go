package actors

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/model"
)

// TestReportUnexpected: protoactor's lifecycle and system messages pass
// silently; anything else is counted and logged with its type.
func TestReportUnexpected(t *testing.T) {
	buf := captureLog(t)
	type stray struct{}
	for _, tc := range []struct {
		msg  any
		want bool
	}{
		{&actor.Started{}, false}, {&actor.Stopping{}, false}, {&actor.Stopped{}, false},
		{&actor.Restarting{}, false}, {&actor.Terminated{}, false}, {&actor.ReceiveTimeout{}, false},
		{&actor.PoisonPill{}, false},
		{&stray{}, true}, {&RunStep{}, true}, {"text", true},
	} {
		before := unexpectedMessages.Load()
		buf.Reset()
		ReportUnexpected("test actor", tc.msg)
		if got := unexpectedMessages.Load() > before; got != tc.want {
			t.Errorf("%T: reported %v, want %v", tc.msg, got, tc.want)
		}
		if tc.want && !strings.Contains(buf.String(), "test actor got an unexpected") {
			t.Errorf("%T: log %q", tc.msg, buf.String())
		}
	}
}

// TestEveryReceiveHasDefault: the message switch of every actor's Receive,
// here and in actors/remote, has a default branch (ReportUnexpected, or a
// delegation to an embedded actor's Receive that has one), so no message is
// dropped unseen.
func TestEveryReceiveHasDefault(t *testing.T) {
	var files []string
	for _, dir := range []string{".", "remote"} {
		fs, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	fset := token.NewFileSet()
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != "Receive" || fn.Body == nil {
				continue
			}
			found++
			var sw *ast.TypeSwitchStmt
			for _, st := range fn.Body.List {
				if s, ok := st.(*ast.TypeSwitchStmt); ok {
					sw = s
					break
				}
			}
			if sw == nil {
				t.Errorf("%s: %s has no message type switch", fset.Position(fn.Pos()), fn.Name.Name)
				continue
			}
			var def *ast.CaseClause
			for _, c := range sw.Body.List {
				if cc := c.(*ast.CaseClause); cc.List == nil {
					def = cc
				}
			}
			if def == nil {
				t.Errorf("%s: Receive's switch has no default branch", fset.Position(sw.Pos()))
				continue
			}
			ok = false
			ast.Inspect(&ast.BlockStmt{List: def.Body}, func(n ast.Node) bool {
				if sel, isSel := n.(*ast.SelectorExpr); isSel && (sel.Sel.Name == "Receive" || sel.Sel.Name == "ReportUnexpected") {
					ok = true
				}
				if id, isID := n.(*ast.Ident); isID && id.Name == "ReportUnexpected" {
					ok = true
				}
				return true
			})
			if !ok {
				t.Errorf("%s: Receive's default branch neither reports nor delegates", fset.Position(def.Pos()))
			}
		}
	}
	// engine root, its watcher, rank, request; proxy, remote rank, worker host, its watcher
	if found < 8 {
		t.Fatalf("found %d Receive methods: is the scan stale?", found)
	}
}

// strayContext is an actor context that only carries a message: any other
// use of the context panics (the embedded interface is nil), so a Receive
// that handles a stray message by touching anything else fails the test.
type strayContext struct {
	actor.Context
	msg any
}

func (c strayContext) Message() any { return c.msg }

// strayMessage is a message no actor accepts.
type strayMessage struct{}

// TestEveryActorReportsStray: each actor of this package, given a message
// it has no case for, reports it (counted and logged with the actor's name)
// and does nothing else with it. actors/remote has the same test for its
// actors.
func TestEveryActorReportsStray(t *testing.T) {
	cfg := Config{Checkpoint: &model.Checkpoint{Config: &model.Config{}}}
	for _, tc := range []struct {
		who   string
		actor actor.Actor
	}{
		{"engine root", &engineRoot{sup: &supervisor{cfg: cfg}, sched: &scheduler{cfg: cfg}}},
		{"engine root watcher", &rootWatcher{}},
		{"rank", &Rank{}},
		{"rank", NewRank(RankHost{})},
		{"request", newRequestActor(&Request{}, nil, newStream(), nil)()},
	} {
		t.Run(tc.who, func(t *testing.T) {
			buf := captureLog(t)
			before := UnexpectedMessages()
			tc.actor.Receive(strayContext{msg: &strayMessage{}})
			if got := UnexpectedMessages() - before; got != 1 {
				t.Errorf("counted %d unexpected messages, want 1", got)
			}
			if want := tc.who + " got an unexpected *actors.strayMessage"; !strings.Contains(buf.String(), want) {
				t.Errorf("log %q does not say %q", buf.String(), want)
			}
		})
	}
}

// TestSchedulerReportsStray: a message the scheduler has no case for is
// reported, and the scheduler keeps answering.
func TestSchedulerReportsStray(t *testing.T) {
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, nil)
	type stray struct{ n int }
	before := unexpectedMessages.Load()
	e.sys.Root.Send(e.root, &stray{n: 1})
	// The mailbox is ordered: once a later query is answered, the stray
	// message has been handled.
	if _, err := e.sys.Root.RequestFuture(e.root, &queryInfo{}, chaosDeadline*10).Result(); err != nil {
		t.Fatal(err)
	}
	if unexpectedMessages.Load() <= before {
		t.Error("the scheduler did not report a stray message")
	}
}
