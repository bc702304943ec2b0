// Package actors is Cohort's runtime: protoactor actors for the engine root,
// one rank per tensor-parallel shard and one actor per request, plus the Go
// API (Engine, Stream) the HTTP edge uses and fault injection.
//
// The engine root (root.go) has two halves. The supervisor (supervisor.go)
// owns the rank group: it spawns each generation, detects its failures and
// tears it down, and keeps restart intensity and readiness (the failure
// contract, docs/failure-contract.md). The scheduler (scheduler.go) wraps
// the pure planner (actors/planner) the way raft's Node wraps RawNode: it
// feeds it events, asks it for the next step, broadcasts the step to every
// rank and applies the ranks' results. A rank actor never computes inside
// Receive: its device executor (one goroutine locked to an OS thread) runs
// the forward pass and the result comes back as a message.
//
// Ranks in other processes are actors/remote's: it implements Placer and
// embeds Rank, and this package does not import it.
package actors
