package remote

import (
	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors/remote/rankpb"
	"cohort/nccl"
)

// The messages of this package's actors that never leave their process
// (what crosses processes is protobuf, in rankpb). A proxy accepts the
// engine's rank family (actors.LoadShard, actors.RunStep) and its
// rankpb replies as well; a remote rank accepts rankpb commands.

// proxyMessage is accepted by a rank proxy.
type proxyMessage interface{ proxyMessage() }

// remoteRankMessage is accepted by a remote rank.
type remoteRankMessage interface{ remoteRankMessage() }

// rankPlaced tells a proxy where its rank runs (or why it could not be placed).
type rankPlaced struct {
	pid    *actor.PID
	worker string
	ring   []string
	group  string
	ncclID []byte // GPU ranks: the placement's NCCL unique id
	err    error
}

// workerDown tells a proxy its worker stopped answering heartbeats.
type workerDown struct {
	addr string
	err  error
}

// ringDialed reports the outcome of joining the collective (DialRing, or
// the NCCL join) to the remote rank.
type ringDialed struct {
	load *rankpb.LoadShard
	comm nccl.Communicator
	err  error
}

// commAsyncError reports the rank's communicator's asynchronous error to
// the remote rank (from its poller, watchComm).
type commAsyncError struct{ err error }

func (*rankPlaced) proxyMessage()          {}
func (*commAsyncError) remoteRankMessage() {}
func (*workerDown) proxyMessage()          {}
func (*ringDialed) remoteRankMessage()     {}
