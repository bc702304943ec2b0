package leakcheck

import (
	"strings"
	"testing"
	"time"
)

// TestLeakedFindsAndForgets: a goroutine of ours started after the
// snapshot is reported while it runs, and not once it ended.
func TestLeakedFindsAndForgets(t *testing.T) {
	before := ids(snapshot())
	stop := make(chan struct{})
	started := make(chan struct{})
	go park(started, stop)
	<-started
	left := leaked(before, 50*time.Millisecond)
	if len(left) != 1 || !strings.Contains(left[0].stack, "park") {
		t.Fatalf("leaked = %v, want the parked goroutine", left)
	}
	if r := report(left, 50*time.Millisecond); !strings.Contains(r, "1 goroutine(s) of ours") {
		t.Errorf("report %q", r)
	}
	close(stop)
	if left := leaked(before, Timeout); len(left) != 0 {
		t.Fatalf("after it ended: %v", left)
	}
}

func TestOurs(t *testing.T) {
	for _, c := range []struct {
		stack string
		want  bool
	}{
		{"goroutine 9 [select]:\ncohort/actors.(*scheduler).startWatchdog.func1()\n\t/x/watchdog.go:30 +0x1", true},
		{"goroutine 9 [chan receive]:\ngithub.com/asynkron/protoactor-go/actor.(*x).y()\n\t/y.go:1\ncreated by cohort/actors/remote.(*workerPool).Place in goroutine 3", true},
		{"goroutine 9 [IO wait]:\ninternal/poll.runtime_pollWait()\n\t/z.go:1\ncreated by google.golang.org/grpc.newServer in goroutine 1", false},
		{"goroutine 9 [chan receive]:\ntesting.(*T).Run()\n\t/t.go:1\ncreated by testing.tRunner in goroutine 1", false},
	} {
		if got := ours(c.stack); got != c.want {
			t.Errorf("ours(%q) = %v, want %v", c.stack, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	g, ok := parse("goroutine 42 [running]:\nmain.main()")
	if !ok || g.id != 42 {
		t.Fatalf("parse = %+v, %v", g, ok)
	}
	if _, ok := parse("not a goroutine"); ok {
		t.Error("parsed garbage")
	}
}
