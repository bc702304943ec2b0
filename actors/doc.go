// Package actors is Cohort's runtime: protoactor actors for the engine root,
// the scheduler, one rank per tensor-parallel shard and one actor per
// request, plus the Go API (Engine, Stream) the HTTP edge uses.
//
// The scheduler wraps the pure planner (actors/planner) the way raft's Node
// wraps RawNode: it feeds it events, asks it for the next step, broadcasts the
// step to every rank and applies the ranks' results. A rank actor never
// computes inside Receive: its device executor (one goroutine locked to an OS
// thread) runs the forward pass and the result comes back as a message.
package actors
