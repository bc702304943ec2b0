package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"cohort/nccl"
)

// PlacedRank is one rank of a generation as the engine root holds it: the
// props of its actor (for a rank in another process, a proxy that becomes
// the root's child like a local rank) and its communicator (whose Abort
// must reach the rank, wherever it runs).
type PlacedRank struct {
	Props *actor.Props
	Comm  nccl.Communicator
}

// Placer puts each generation's ranks outside this process (actors/remote
// places them on worker processes). The engine root calls it on its own
// goroutine, so no method may block.
type Placer interface {
	// Place returns the size ranks of generation gen, in rank order. While
	// the ranks cannot be placed yet, waiting is told why (readiness stays
	// false with that reason); it may be called from any goroutine.
	Place(gen uint64, size int, waiting func(why string)) []PlacedRank
	// Status says why placement waits ("" when it does not), for the
	// error of a rebuild that timed out.
	Status() string
	// Close releases what the Placer holds, after the engine root stopped.
	Close()
}

// NewPlacer makes an engine's Placer on the engine's actor system, from the
// engine's configuration (defaults applied).
type NewPlacer func(sys *actor.ActorSystem, cfg Config) (Placer, error)
