package remote

import (
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors"
)

// strayContext is an actor context that only carries a message: any other
// use of the context panics (the embedded interface is nil).
type strayContext struct {
	actor.Context
	msg any
}

func (c strayContext) Message() any { return c.msg }

// strayMessage is a message no actor accepts.
type strayMessage struct{}

// TestEveryActorReportsStray: each actor of this package, given a message
// it has no case for, reports it through actors.ReportUnexpected (a remote
// rank through the local rank it embeds) and does nothing else with it.
func TestEveryActorReportsStray(t *testing.T) {
	for _, tc := range []struct {
		who   string
		actor actor.Actor
	}{
		{"remote rank proxy", &rankProxy{}},
		{"rank", newRemoteRank(&workerState{})},
		{"worker host", &workerHost{}},
		{"worker host watcher", &hostWatcher{}},
	} {
		t.Run(tc.who, func(t *testing.T) {
			buf := captureLog(t)
			before := actors.UnexpectedMessages()
			tc.actor.Receive(strayContext{msg: &strayMessage{}})
			if got := actors.UnexpectedMessages() - before; got != 1 {
				t.Errorf("counted %d unexpected messages, want 1", got)
			}
			if want := tc.who + " got an unexpected *remote.strayMessage"; !strings.Contains(buf.String(), want) {
				t.Errorf("log %q does not say %q", buf.String(), want)
			}
		})
	}
}
