package planner

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"cohort/actors/prefix"
)

// memory models what the ranks hold, as values that name exactly which
// tokens produced them: a slot's state and a snapshot place hold the hash
// of the tokens computed into them, a KV page position the hash of the
// tokens up to and including its own. A plan is correct when every
// sequence it schedules finds its slot and the pages before its chunk
// holding exactly its own tokens' values, which is what computing it from
// scratch would give: the prefix cache may change where a value comes
// from, never the value.
type memory struct {
	pageSize int
	slots    []uint64
	places   []uint64
	pages    [][]uint64
}

const garbage = 1 // a value no token sequence hashes to (tokenHash never returns it)

func newMemory(cfg Config) *memory {
	m := &memory{pageSize: cfg.PageSize, slots: make([]uint64, cfg.Slots), places: make([]uint64, cfg.Snapshots),
		pages: make([][]uint64, cfg.KVPages)}
	for i := range m.pages {
		m.pages[i] = make([]uint64, cfg.PageSize)
	}
	m.wipe()
	return m
}

// wipe is a rebuilt group: nothing of the old memory survives.
func (m *memory) wipe() {
	for _, s := range [][]uint64{m.slots, m.places} {
		for i := range s {
			s[i] = garbage
		}
	}
	for _, pg := range m.pages {
		for i := range pg {
			pg[i] = garbage
		}
	}
}

// tokenHash is the value after tokens: the empty sequence has the value of
// a zeroed slot.
func tokenHash(tokens []int32) uint64 {
	h := uint64(14695981039346656037)
	for _, t := range tokens {
		h = (h ^ uint64(uint32(t))) * 1099511628211
		h |= 2 // never 0 or garbage
	}
	return h
}

// cacheWorld drives a planner with the prefix cache through random
// workloads that share prefixes: a few system prompts, conversations that
// continue earlier requests' tokens, prompt-logprob requests, aborts,
// failures (RequeueAll, memory wiped) and cache resets.
type cacheWorld struct {
	t        *testing.T
	r        *rand.Rand
	cfg      Config
	p        *Planner
	mem      *memory
	next     RequestID
	live     map[RequestID]*worldReq
	tables   map[RequestID][]int32 // page tables of running requests, from the plans
	done     [][]int32             // token sequences of finished requests
	prompts  [][]int32             // every prompt so far
	finished map[RequestID][]int32 // the tokens of each finished request, for scripts
	system   [][]int32
}

type worldReq struct {
	tokens []int32 // prompt, then generated
	prompt int
	maxNew int
}

func (w *cacheWorld) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("step %d: %s", w.p.Stats().Step, fmt.Sprintf(format, args...))
}

func (w *cacheWorld) add() {
	var prompt []int32
	switch k := w.r.IntN(4); {
	case k < 2: // a shared system prompt and a private question
		prompt = slices.Clone(w.system[w.r.IntN(len(w.system))])
	case k == 2 && len(w.done) > 0: // the next turn of a finished conversation
		prompt = slices.Clone(w.done[w.r.IntN(len(w.done))])
	}
	boundary := len(prompt)
	for range 1 + w.r.IntN(40) {
		prompt = append(prompt, int32(w.r.IntN(50)))
	}
	if len(w.prompts) > 0 && w.r.IntN(8) == 0 { // the same prompt again
		prompt = slices.Clone(w.prompts[w.r.IntN(len(w.prompts))])
	}
	w.prompts = append(w.prompts, prompt)
	w.next++
	q := Request{ID: w.next, PromptLen: len(prompt), MaxNewTokens: 1 + w.r.IntN(30),
		Blocks: prefix.BlockHashes(prompt, w.cfg.PageSize), NoResume: w.r.IntN(10) == 0}
	if boundary > 0 && w.r.IntN(2) == 0 {
		q.Boundaries = []int{boundary}
	}
	if total := q.PromptLen + q.MaxNewTokens; total > w.cfg.MaxModelLen || (total+w.cfg.PageSize-1)/w.cfg.PageSize > w.cfg.KVPages {
		return // Add refuses it
	}
	if err := w.p.Add(q); err != nil {
		w.fatalf("add: %v", err)
	}
	w.live[q.ID] = &worldReq{tokens: prompt, prompt: len(prompt), maxNew: q.MaxNewTokens}
}

// run executes a plan on the memory as the ranks do, checking it first.
func (w *cacheWorld) run(plan Plan) {
	for _, f := range plan.Freed {
		delete(w.tables, f.ID)
	}
	for _, s := range plan.Seqs {
		w.checkPages(s)
		w.tables[s.ID] = slices.Clone(s.Pages)
	}
	held := map[int32]bool{}
	for _, id := range slices.Sorted(maps.Keys(w.tables)) {
		for _, pg := range w.tables[id] {
			held[pg] = true
		}
	}
	if st := w.p.Stats(); len(held)+st.FreePages != w.cfg.KVPages {
		w.fatalf("%d pages held + %d free or idle != %d", len(held), st.FreePages, w.cfg.KVPages)
	}
	for _, slot := range plan.Reset {
		w.mem.slots[slot] = tokenHash(nil)
	}
	for _, s := range plan.Seqs { // restores, before any forward pass
		if s.Cached > 0 && slices.Contains(plan.Reset, s.Slot) {
			if w.cfg.PagesOnly { // no slot state: the pages are all there is
				w.mem.slots[s.Slot] = tokenHash(w.live[s.ID].tokens[:s.Cached])
				continue
			}
			if s.Restore < 0 {
				w.fatalf("seq %d resumes at %d with no snapshot", s.ID, s.Cached)
			}
			w.mem.slots[s.Slot] = w.mem.places[s.Restore]
		}
	}
	prefill := 0
	for _, s := range plan.Seqs {
		w.forward(s)
		if !(s.Len == 1 && s.Sample) {
			prefill += s.Len
		}
	}
	if prefill > w.cfg.MaxPrefillTokens {
		w.fatalf("%d prefill tokens over the budget", prefill)
	}
	for _, s := range plan.Seqs { // saves, after
		if s.Save >= 0 {
			if (s.Cached+s.Len)%w.cfg.PageSize != 0 {
				w.fatalf("seq %d saves a snapshot at %d, not a block boundary", s.ID, s.Cached+s.Len)
			}
			w.mem.places[s.Save] = w.mem.slots[s.Slot]
		}
	}
}

// checkPages: no page of the chunk is another running request's, and none
// of the pages is written while it is cached for others.
func (w *cacheWorld) checkPages(s SeqPlan) {
	first := s.Cached / w.cfg.PageSize
	for _, id := range slices.Sorted(maps.Keys(w.tables)) {
		if id == s.ID {
			continue
		}
		for _, pg := range s.Pages[first:] {
			if slices.Contains(w.tables[id], pg) {
				w.fatalf("seq %d writes page %d, which request %d holds", s.ID, pg, id)
			}
		}
	}
	c := w.p.cache
	for _, pg := range s.Pages[first:] {
		if c.index.Contains(pg) {
			w.fatalf("seq %d writes page %d, which is cached", s.ID, pg)
		}
	}
}

// forward checks that the sequence finds its own tokens' values in its
// slot and pages, then writes those of its chunk.
func (w *cacheWorld) forward(s SeqPlan) {
	q := w.live[s.ID]
	switch {
	case q == nil:
		w.fatalf("seq %d is not live", s.ID)
	case s.Len < 1 || s.Cached+s.Len > len(q.tokens) || s.Sample != (s.Cached+s.Len == len(q.tokens)):
		w.fatalf("seq %d computes [%d, %d) of %d tokens (sample %v)", s.ID, s.Cached, s.Cached+s.Len, len(q.tokens), s.Sample)
	}
	ps := w.cfg.PageSize
	if got, want := w.mem.slots[s.Slot], tokenHash(q.tokens[:s.Cached]); got != want {
		w.fatalf("seq %d (cached %d) finds slot %d holding another state", s.ID, s.Cached, s.Slot)
	}
	for p := range s.Cached {
		if w.mem.pages[s.Pages[p/ps]][p%ps] != tokenHash(q.tokens[:p+1]) {
			w.fatalf("seq %d finds position %d of page %d holding another token's KV", s.ID, p, s.Pages[p/ps])
		}
	}
	for p := s.Cached; p < s.Cached+s.Len; p++ {
		w.mem.pages[s.Pages[p/ps]][p%ps] = tokenHash(q.tokens[:p+1])
	}
	w.mem.slots[s.Slot] = tokenHash(q.tokens[:s.Cached+s.Len])
}

// update applies the plan: every sampled request gets a token (its blocks
// told to the planner), and ends at its max.
func (w *cacheWorld) update(plan Plan) {
	var sampled []RequestID
	for _, s := range plan.Seqs {
		if s.Sample {
			sampled = append(sampled, s.ID)
		}
	}
	w.p.Update(plan, sampled)
	ps := w.cfg.PageSize
	for _, id := range sampled {
		q := w.live[id]
		q.tokens = append(q.tokens, w.token())
		if n := len(q.tokens); n%ps == 0 {
			hs := prefix.BlockHashes(q.tokens, ps)
			if !w.p.AddBlock(id, hs[len(hs)-1]) {
				w.fatalf("AddBlock of request %d's block %d refused", id, len(hs)-1)
			}
		}
		if len(q.tokens)-q.prompt >= q.maxNew {
			w.end(id, true)
		}
	}
}

// doneTokens is a finished request's whole sequence.
func (w *cacheWorld) doneTokens(id RequestID) []int32 { return w.finished[id] }

// token is the next generated token: random, or 7 in scripts.
func (w *cacheWorld) token() int32 {
	if w.r == nil {
		return 7
	}
	return int32(w.r.IntN(50))
}

func (w *cacheWorld) end(id RequestID, finished bool) {
	if finished {
		w.done = append(w.done, w.live[id].tokens)
		w.finished[id] = w.live[id].tokens
		w.p.Finish(id)
	} else {
		w.p.Abort(id)
	}
	delete(w.live, id)
}

func newCacheWorld(t *testing.T, seed uint64, cfg Config) *cacheWorld {
	w, err := newWorld(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.r = rand.New(rand.NewPCG(seed, 17))
	for i := range 3 {
		sys := make([]int32, 20+i*13)
		for j := range sys {
			sys[j] = int32(100*(i+1) + j)
		}
		w.system = append(w.system, sys)
	}
	return w
}

func newWorld(t *testing.T, cfg Config) (*cacheWorld, error) {
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &cacheWorld{t: t, cfg: cfg, p: p, mem: newMemory(cfg), live: map[RequestID]*worldReq{},
		tables: map[RequestID][]int32{}, finished: map[RequestID][]int32{}}, nil
}

// TestCacheProperty runs random shared-prefix workloads against the memory
// model: outputs equal to computing from scratch (every value read is the
// value of its own tokens), no page written while another request holds it
// or while it is cached, pages accounted for, the prefill budget kept; and
// the cache is used (some tokens resumed). The configurations vary: a
// single slot or place, pages of 2 to 6 tokens, tight page budgets.
func TestCacheProperty(t *testing.T) {
	var hits uint64
	for seed := range uint64(24) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			cfg := Config{MaxPrefillTokens: 8 + int(seed%6)*7, MaxRows: 2 + int(seed%5), Slots: 1 + int(seed%4), KVPages: 40 + int(seed%6)*8, PageSize: 2 + 2*int(seed%3),
				MaxModelLen: 150, PrefixCache: true, Snapshots: 1 + int(seed%7)*2, MarkCutBlocks: int(seed % 3)}
			w := newCacheWorld(t, seed, cfg)
			for range 1500 {
				switch k := w.r.IntN(100); {
				case k < 12:
					w.add()
				case k < 14 && len(w.live) > 0:
					ids := slices.Sorted(maps.Keys(w.live))
					w.end(ids[w.r.IntN(len(ids))], false)
				case k < 15: // a failed step: the group is rebuilt, its memory gone
					w.p.RequeueAll()
					w.tables = map[RequestID][]int32{}
					w.mem.wipe()
					continue
				case k < 16:
					w.p.ResetCache()
				}
				plan := w.p.Schedule()
				if len(plan.Seqs) == 0 {
					continue
				}
				w.run(plan)
				w.update(plan)
			}
			st := w.p.Stats()
			if st.PrefixHits >= st.PrefixQueries {
				t.Errorf("hits %d of %d queried tokens", st.PrefixHits, st.PrefixQueries)
			}
			hits += st.PrefixHits
			t.Logf("%v", st)
		})
	}
	if hits == 0 {
		t.Error("no workload resumed from the cache")
	}
}
