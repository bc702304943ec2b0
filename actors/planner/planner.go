package planner

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cohort/actors/prefix"
)

// RequestID identifies a request; ids are unique among live requests.
type RequestID uint64

// maxField bounds every Config field, so sums and products of them fit an
// int and page ids fit an int32.
const maxField = 1 << 30

// Config sizes the planner.
type Config struct {
	MaxPrefillTokens int // per-step budget of prefill tokens (chunked prefill)
	MaxRows          int // per-step cap on scheduled sequences (decode rows + prefill chunks)
	Slots            int // recurrent-state slots (max concurrent running requests)
	KVPages          int // total KV pages
	PageSize         int // tokens per page
	MaxModelLen      int // context length: prompt + max new tokens must fit
	// PrefixCache caches the KV pages of full blocks by content, shares
	// them read-only between requests and resumes a request after the
	// longest cached prefix of its tokens that ends in a state snapshot
	// (see cache.go).
	PrefixCache bool
	// Snapshots is the number of state snapshot places the ranks hold
	// (with PrefixCache; 0: none, so only PagesOnly models resume).
	Snapshots int
	// PagesOnly says the model keeps no per-slot state (its state is all
	// KV): a request resumes after any cached block, with no snapshot.
	PagesOnly bool
	// MarkCutBlocks is how many blocks past a prefill chunk's start a
	// request's mark must lie for the chunk to be cut there (0: any mark
	// past the start). A cut costs the request a step of latency; a
	// snapshot at a mark close to where the request resumed saves a later
	// request only those few blocks, since it can resume from the snapshot
	// this one started from. A chat turn resumes from its previous reply's
	// last block, a block before the previous turn's end (its mark): a cut
	// there gave every turn's prefill a step of its own (bench --chat on
	// the H200, 4b-shape, 32 conversations: TTFT p50 after the first turn
	// 157 ms with it). The engine sets DefaultMarkCutBlocks.
	MarkCutBlocks int
}

// DefaultMarkCutBlocks is the engine's MarkCutBlocks.
const DefaultMarkCutBlocks = 2

// Validate reports the first field that is out of range.
func (c Config) Validate() error {
	fields := []struct {
		name string
		v    int
	}{
		{"MaxPrefillTokens", c.MaxPrefillTokens},
		{"MaxRows", c.MaxRows},
		{"Slots", c.Slots},
		{"KVPages", c.KVPages},
		{"PageSize", c.PageSize},
		{"MaxModelLen", c.MaxModelLen},
	}
	for _, f := range fields {
		if f.v < 1 || f.v > maxField {
			return fmt.Errorf("planner: invalid config: %s = %d, must be in [1, %d]", f.name, f.v, maxField)
		}
	}
	if c.Snapshots < 0 || c.Snapshots > maxField {
		return fmt.Errorf("planner: invalid config: Snapshots = %d, must be in [0, %d]", c.Snapshots, maxField)
	}
	if c.MarkCutBlocks < 0 || c.MarkCutBlocks > maxField {
		return fmt.Errorf("planner: invalid config: MarkCutBlocks = %d, must be in [0, %d]", c.MarkCutBlocks, maxField)
	}
	return nil
}

// Request is what Add needs to know about a request.
type Request struct {
	ID        RequestID
	PromptLen int // prompt tokens, at least 1
	// MaxNewTokens is how many tokens the request may generate, at least 1:
	// Add rejects a request whose prompt and MaxNewTokens do not fit the
	// context or the KV cache. The caller ends the request (Finish) at its
	// MaxNewTokens-th token at the latest; the pages the planner promises
	// a request alone assume it.
	MaxNewTokens int
	// MaxChunk caps this request's prefill tokens per step (0: only the
	// step budget does): a request that needs the logits of every prompt
	// row keeps them small.
	MaxChunk int
	// Blocks are the chained hashes of the prompt's full blocks of
	// PageSize tokens (prefix.BlockHashes), for PrefixCache. A request
	// without them neither resumes from the cache nor adds to it; AddBlock
	// extends them as generated tokens fill blocks.
	Blocks []prefix.Hash
	// NoResume keeps the request from resuming from the cache (it needs
	// every prompt row computed: prompt logprobs); its blocks are still
	// cached for others.
	NoResume bool
	// Boundaries are prompt offsets where later requests are likely to
	// part from this one (the chat template's: the end of the system and
	// tool part, the end of each earlier turn). A prefill chunk is cut,
	// and a snapshot taken, at the last block boundary at or before each;
	// without boundaries, at the end of the prompt's last full block.
	Boundaries []int
}

// Rejection reasons (Rejection.Reason).
const (
	ReasonContextLength = "context_length" // prompt + max new tokens exceed MaxModelLen
	ReasonCapacity      = "capacity"       // the request could not fit in the KV cache even alone
	ReasonDuplicate     = "duplicate"      // a live request already has this id
	ReasonInvalid       = "invalid"        // PromptLen or MaxNewTokens below 1
)

// Rejection is the error Add returns for a request that can never run.
// Msg is meant for the client; Reason is for machines.
type Rejection struct {
	ID     RequestID
	Reason string
	Msg    string
}

func (r *Rejection) Error() string {
	return "planner: request " + strconv.FormatUint(uint64(r.ID), 10) + " rejected (" + r.Reason + "): " + r.Msg
}

// ErrRejected matches every *Rejection with errors.Is.
var ErrRejected = errors.New("planner: request rejected")

// Is makes errors.Is(err, ErrRejected) true for a Rejection.
func (r *Rejection) Is(target error) bool { return target == ErrRejected }

// request is the planner's record of one live request.
type request struct {
	id RequestID
	// known is the sequence's length: its prompt, then one token for each
	// sample Update was told of. The planner schedules by it and decides
	// nothing else from it: how many tokens a request generated, and when
	// it ends, is its caller's (see Finish).
	known     int
	computed  int     // tokens whose KV/state is computed
	running   bool    // holds a slot (and pages)
	admission uint64  // admission number, set each time it is admitted
	slot      int     // valid while running
	maxChunk  int     // Request.MaxChunk
	pages     []int32 // page table, valid while running: only ever appended to (plans share it)
	pc        reqCache
	// sampledIn is the Update call (Planner.updates) whose sampled ids
	// named the request last.
	sampledIn uint64
}

// remaining is the number of known tokens not computed yet.
func (r *request) remaining() int { return r.known - r.computed }

// chunk is the prefill chunk the request takes from a budget.
func (r *request) chunk(budget int) int {
	n := min(r.remaining(), budget)
	if r.maxChunk > 0 {
		n = min(n, r.maxChunk)
	}
	return n
}

// Planner is the scheduling state machine. The zero value is not usable; call New.
type Planner struct {
	cfg Config

	reqs    map[RequestID]*request // lookup only, never ranged over
	waiting []*request             // FCFS queue
	running []*request             // admission order

	freeSlots minHeap[int]
	freePages minHeap[int32]

	freed         []Freed // released since the previous non-empty plan
	step          uint64
	nextAdmission uint64
	preemptions   uint64

	inflight *inflight // the latest plan, until Update applies it
	cache    *cache    // nil without Config.PrefixCache

	// Buffers reused from step to step, so that a steady step allocates
	// little; what they hold between steps means nothing.
	order   []*request // the running set as a step began (see runningAtStart)
	spare   []entry    // the entries of the last plan applied or abandoned
	updates uint64     // Update calls (request.sampledIn)
}

// inflight records what the latest plan scheduled, with the admission number
// each request had, so Update ignores requests aborted or requeued since.
type inflight struct {
	step    uint64
	entries []entry
}

type entry struct {
	r         *request
	admission uint64
	cached    int
	len       int
	sample    bool
	got       bool // Update: the caller's sampled ids name the request
	prefill   bool // uses the prefill budget
	restore   int  // snapshot place restored into the slot before the step; -1: none
	save      save // the snapshot saved from the slot after the step (place -1: none)
}

// New returns a planner for cfg.
func New(cfg Config) (*Planner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Planner{cfg: cfg, reqs: make(map[RequestID]*request)}
	p.freeSlots = make(minHeap[int], 0, cfg.Slots)
	for s := range cfg.Slots {
		p.freeSlots = append(p.freeSlots, s) // ascending is a valid heap
	}
	p.freePages = make(minHeap[int32], 0, cfg.KVPages)
	for pg := range cfg.KVPages {
		p.freePages = append(p.freePages, int32(pg))
	}
	if cfg.PrefixCache {
		p.cache = newCache(cfg)
	}
	return p, nil
}

// pagesFor is the number of pages that hold n tokens.
func (p *Planner) pagesFor(n int) int { return (n + p.cfg.PageSize - 1) / p.cfg.PageSize }

// Add enqueues r at the back of the waiting queue, or rejects it with a
// *Rejection.
func (p *Planner) Add(r Request) error {
	reject := func(reason string, msg ...string) error {
		return &Rejection{ID: r.ID, Reason: reason, Msg: strings.Join(msg, "")}
	}
	itoa := strconv.Itoa
	switch {
	case r.PromptLen < 1:
		return reject(ReasonInvalid, "the prompt must have at least 1 token, got ", itoa(r.PromptLen))
	case r.MaxNewTokens < 1:
		return reject(ReasonInvalid, "max_tokens must be at least 1, got ", itoa(r.MaxNewTokens))
	case r.MaxChunk < 0:
		return reject(ReasonInvalid, "the prefill chunk cap must not be negative, got ", itoa(r.MaxChunk))
	case len(r.Blocks) > r.PromptLen/p.cfg.PageSize:
		return reject(ReasonInvalid, itoa(len(r.Blocks)), " block hashes for a prompt of ", itoa(r.PromptLen), " tokens")
	}
	if _, ok := p.reqs[r.ID]; ok {
		return reject(ReasonDuplicate, "request id ", strconv.FormatUint(uint64(r.ID), 10), " is already in use")
	}
	if r.PromptLen > p.cfg.MaxModelLen || r.MaxNewTokens > p.cfg.MaxModelLen-r.PromptLen {
		return reject(ReasonContextLength, "this model's maximum context length is ", itoa(p.cfg.MaxModelLen),
			" tokens, but ", itoa(r.PromptLen), " prompt tokens plus ", itoa(r.MaxNewTokens),
			" completion tokens were requested")
	}
	total := r.PromptLen + r.MaxNewTokens
	if need := p.pagesFor(total); need > p.cfg.KVPages {
		return reject(ReasonCapacity, itoa(total), " tokens need ", itoa(need), " KV pages of ",
			itoa(p.cfg.PageSize), " tokens but the cache has only ", itoa(p.cfg.KVPages), " pages (",
			itoa(p.cfg.KVPages*p.cfg.PageSize), " tokens)")
	}
	q := &request{id: r.ID, known: r.PromptLen, maxChunk: r.MaxChunk, slot: -1}
	if p.cache != nil {
		q.pc = newReqCache(r, p.cfg.PageSize)
	}
	p.reqs[r.ID] = q
	p.waiting = append(p.waiting, q)
	return nil
}

// Abort removes a waiting or running request; a running one's slot and pages
// are reported in the next plan's Freed. It reports whether id was live.
func (p *Planner) Abort(id RequestID) bool { return p.remove(id) }

// Finish ends a request whose end its caller decided (its length, EOS, a
// stop token or string, a complete grammar): the planner decides no end. It
// frees like Abort and reports whether id was live.
func (p *Planner) Finish(id RequestID) bool { return p.remove(id) }

func (p *Planner) remove(id RequestID) bool {
	r, ok := p.reqs[id]
	if !ok {
		return false
	}
	if r.running {
		p.release(r)
	} else {
		p.waiting = slices.DeleteFunc(p.waiting, func(q *request) bool { return q == r })
	}
	delete(p.reqs, id)
	return true
}

// release takes a running request out of the running set and frees its slot
// and pages, recording them for the next plan's Freed.
func (p *Planner) release(r *request) {
	p.running = slices.DeleteFunc(p.running, func(q *request) bool { return q == r })
	p.freed = append(p.freed, Freed{ID: r.id, Slot: r.slot, Pages: r.pages})
	p.freeSlots.push(r.slot)
	for _, pg := range r.pages {
		p.freePage(pg)
	}
	r.running, r.slot, r.pages, r.computed, r.pc.indexed = false, -1, nil, 0, 0
}

// Requeue puts a running request back at the front of the waiting queue with
// nothing computed: its prompt and generated tokens will be re-prefilled. Its
// slot and pages are freed. It does nothing for a request that is not running.
func (p *Planner) Requeue(id RequestID) {
	if r, ok := p.reqs[id]; ok && r.running {
		p.requeue(r)
	}
}

func (p *Planner) requeue(r *request) {
	p.release(r)
	p.waiting = slices.Insert(p.waiting, 0, r)
}

// RequeueAll requeues every running request, keeping their admission order at
// the front of the queue, and returns their ids in that order. It is called
// when a step failed and the group is rebuilt, so it also empties the
// prefix cache (ResetCache): the pages' and snapshots' contents are gone.
func (p *Planner) RequeueAll() []RequestID {
	p.abandonInflight()
	all := slices.Clone(p.running)
	ids := make([]RequestID, len(all))
	for i, r := range all {
		ids[i] = r.id
		p.release(r)
	}
	p.waiting = append(all, p.waiting...)
	p.ResetCache()
	return ids
}

// Stats is a snapshot of the planner's occupancy and counters.
type Stats struct {
	Running     int
	Waiting     int
	FreeSlots   int
	FreePages   int
	UsedPages   int
	Preemptions uint64 // requests the planner preempted for pages
	Step        uint64 // the latest non-empty plan's Step
	// The prefix cache (zero without Config.PrefixCache). FreePages counts
	// its idle pages: they are taken when no page is free.
	CachedPages       int    // pages in the cache, held or idle
	Snapshots         int    // snapshots kept (or being saved)
	SnapshotEvictions uint64 // snapshots evicted for newer ones
	// PrefixQueries is the prompt tokens of requests looked up at their
	// first admission, PrefixHits how many of those resumed from the
	// cache (vLLM's prefix_cache_queries and prefix_cache_hits).
	PrefixQueries, PrefixHits uint64
}

// Stats returns the current occupancy.
func (p *Planner) Stats() Stats {
	st := Stats{
		Running:     len(p.running),
		Waiting:     len(p.waiting),
		FreeSlots:   len(p.freeSlots),
		FreePages:   p.available(),
		UsedPages:   p.cfg.KVPages - p.available(),
		Preemptions: p.preemptions,
		Step:        p.step,
	}
	if c := p.cache; c != nil {
		st.CachedPages, st.Snapshots, st.SnapshotEvictions = c.index.Cached(), c.snaps.Len(), c.snaps.Evicted()
		st.PrefixQueries, st.PrefixHits = c.queries, c.hits
	}
	return st
}

func (s Stats) String() string {
	var b strings.Builder
	b.WriteString("running=" + strconv.Itoa(s.Running))
	b.WriteString(" waiting=" + strconv.Itoa(s.Waiting))
	b.WriteString(" free_slots=" + strconv.Itoa(s.FreeSlots))
	b.WriteString(" free_pages=" + strconv.Itoa(s.FreePages))
	b.WriteString(" used_pages=" + strconv.Itoa(s.UsedPages))
	b.WriteString(" preemptions=" + strconv.FormatUint(s.Preemptions, 10))
	b.WriteString(" step=" + strconv.FormatUint(s.Step, 10))
	if s.CachedPages > 0 || s.Snapshots > 0 || s.PrefixQueries > 0 {
		b.WriteString(" cached_pages=" + strconv.Itoa(s.CachedPages))
		b.WriteString(" snapshots=" + strconv.Itoa(s.Snapshots))
		b.WriteString(" prefix_hits=" + strconv.FormatUint(s.PrefixHits, 10) + "/" + strconv.FormatUint(s.PrefixQueries, 10))
	}
	return b.String()
}
