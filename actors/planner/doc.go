// Package planner is Cohort's scheduling policy: a pure, deterministic state
// machine that decides, step by step, which prefill chunks and decode rows
// run, within the token budget and the capacity (recurrent-state slots and
// KV pages). It is to the engine root's scheduler what raft's RawNode is to
// Node, and its contract is vLLM v1's schedule() / update_from_output().
//
// The planner has no goroutines, channels, locks, clock, randomness or I/O,
// and it never ranges over a map to produce output: the same calls give
// byte-identical plans. It is not safe for concurrent use; the engine root's
// scheduler owns it.
//
// # Usage
//
//  1. Add enqueues a request (FCFS). It returns a *Rejection when the request
//     can never run: bad lengths, longer than the context, larger than the
//     whole KV cache, or a duplicate id.
//  2. Schedule returns the next Plan. Its Freed lists the slots and pages
//     released since the previous plan and its Reset the slots assigned in
//     this plan; ranks apply both before running the step. An idle planner
//     returns an empty plan (no Seqs) and keeps pending Freed entries for the
//     next non-empty one.
//  3. The caller runs the plan on every rank, then calls Update with the plan
//     and the ids that got a new token (every Seq with Sample set). The
//     planner decides no request's end: the caller, which owns the tokens,
//     calls Finish when one ends (at its MaxNewTokens-th token at the latest).
//     Only the latest plan can be applied, and only once: a duplicate or
//     stale Update is a no-op. When a step fails (a rank died, the group is
//     rebuilt), call RequeueAll instead of Update: every running request is
//     re-prefilled from its known tokens into freshly reset slots.
//  4. Abort and Finish end a request at any time (client gone; its length,
//     EOS, a stop token or string); Requeue and RequeueAll send running
//     requests back to the front of the queue to be re-prefilled
//     (preemption, replay after a rebuild).
//
// A Seq with Sample set whose id is missing from Update's sampled list has no
// next token yet; it is not scheduled again until the caller finishes,
// aborts or requeues it (a recurrent state cannot recompute a token it
// already consumed).
//
// # Policy
//
// Each step schedules, in this order:
//
//   - decode rows: every running request with one token left to compute, in
//     admission order, up to MaxRows; they do not use the prefill budget;
//   - prefill chunks of running requests that are part-way through their
//     prompt (or a re-prefill), in admission order;
//   - new admissions from the head of the waiting queue while a slot is free
//     and the pages of the first chunk can be allocated. Admission is strictly
//     FCFS: when the head does not fit, nothing behind it is admitted. No
//     request is admitted in a step that preempted one.
//
// Prefill chunks take min(remaining, budget left) tokens of MaxPrefillTokens.
// Pages are allocated lazily to cover Cached+Len. When a running request
// needs pages and too few are free, running requests admitted after it are
// preempted, youngest first (requeued at the front of the queue, slot and
// pages freed, counted in Stats.Preemptions), and the allocation is retried.
// When even that would not free enough, nothing is preempted and the request
// sits this step out, keeping its pages. So a younger request never evicts an
// older one and the oldest running request always gets its pages. Slots and
// pages are handed out lowest-free-first.
package planner
