package actors

import (
	"log"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// unexpectedMessages counts the messages that reached an actor with no
// case for them (for tests and diagnostics).
var unexpectedMessages atomic.Int64

// ReportUnexpected is every Receive's default branch, here and in
// actors/remote. protoactor's own lifecycle and system messages, which
// every actor sees, are ignored; any other message is a bug in its sender
// or a message sent to the wrong actor, so it is counted and logged with
// the actor (who) and the message type (nothing is done with it).
func ReportUnexpected(who string, msg any) {
	switch msg.(type) {
	case actor.AutoReceiveMessage, actor.SystemMessage, *actor.ReceiveTimeout:
		return
	}
	unexpectedMessages.Add(1)
	log.Printf("actors: %s got an unexpected %T; ignored", who, msg)
}

// UnexpectedMessages returns how many messages ReportUnexpected counted
// since the process started.
func UnexpectedMessages() int64 { return unexpectedMessages.Load() }
