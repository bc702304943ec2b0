package planner

import "slices"

// Plan is one step: what every rank computes, and which slots and pages to
// clear before computing it.
type Plan struct {
	Step  uint64    // increments per non-empty plan; 0 for an empty one
	Seqs  []SeqPlan // decode rows first (admission order), then prefill chunks (running in admission order, then new admissions in queue order)
	Freed []Freed   // slots and pages released since the previous non-empty plan, in the order they were released
	Reset []int     // slots assigned in this plan, ascending: zero their state before the step
}

// SeqPlan is one sequence of a step.
type SeqPlan struct {
	ID     RequestID
	Slot   int
	Cached int     // tokens already computed (KV/state) before this step
	Len    int     // tokens to compute now (1 for a decode row)
	Pages  []int32 // all pages of the sequence, covering Cached+Len tokens (read-only: shared with the planner's page table)
	Sample bool    // this step computes the last known token, so a new token is sampled
	// Restore, on an admission that resumes from the prefix cache (Cached
	// > 0), is the snapshot place to copy into the slot before the step
	// (-1: none; a model without slot state resumes without one).
	Restore int
	// Save is the snapshot place to copy the slot's state into after the
	// step (-1: none): the state after Cached+Len tokens.
	Save int
}

// Freed is a released slot and its pages.
type Freed struct {
	ID    RequestID
	Slot  int
	Pages []int32
}

// builder accumulates one plan while Schedule runs.
type builder struct {
	entries   []entry
	rows      int
	budget    int // prefill tokens left
	preempted bool
	reset     []int
}

func (b *builder) add(r *request, n int, prefill bool) *entry {
	b.entries = append(b.entries, entry{r: r, admission: r.admission, cached: r.computed, len: n,
		sample: r.computed+n == r.known, prefill: prefill, restore: -1, save: save{place: -1}})
	b.rows++
	if prefill {
		b.budget -= n
	}
	return &b.entries[len(b.entries)-1]
}

// drop removes r's entry, if any, returning its row and prefill tokens.
func (b *builder) drop(r *request) {
	i := slices.IndexFunc(b.entries, func(e entry) bool { return e.r == r })
	if i < 0 {
		return
	}
	b.rows--
	if b.entries[i].prefill {
		b.budget += b.entries[i].len
	}
	b.entries = slices.Delete(b.entries, i, i+1)
}

// Schedule decides the next step within Config.MaxPrefillTokens. It returns
// an empty plan (no Seqs) when there is nothing to run.
func (p *Planner) Schedule() Plan { return p.ScheduleWithin(p.cfg.MaxPrefillTokens) }

// ScheduleWithin decides the next step with a prefill budget of at most
// maxPrefill tokens (clamped to [1, Config.MaxPrefillTokens]): the caller
// sizes steps to what it measured they cost. Decode rows do not use the
// budget.
func (p *Planner) ScheduleWithin(maxPrefill int) Plan {
	p.abandonInflight()
	b := &builder{budget: min(max(maxPrefill, 1), p.cfg.MaxPrefillTokens), entries: p.spare}
	p.spare = nil
	p.scheduleDecode(b)
	p.scheduleRunningPrefill(b)
	if !b.preempted {
		p.admit(b)
	}
	if len(b.entries) == 0 {
		p.spare = b.entries
		return Plan{}
	}
	p.step++
	plan := Plan{Step: p.step, Seqs: make([]SeqPlan, len(b.entries)), Freed: p.freed, Reset: b.reset}
	p.freed = nil
	for i := range b.entries { // the entries are final: reserve their snapshots
		e := &b.entries[i]
		p.planSave(e)
		// The page table is only appended to (a release drops it), so the
		// plan shares it, capped to its length now, instead of a copy.
		pages := e.r.pages[:len(e.r.pages):len(e.r.pages)]
		plan.Seqs[i] = SeqPlan{ID: e.r.id, Slot: e.r.slot, Cached: e.cached, Len: e.len,
			Pages: pages, Sample: e.sample, Restore: e.restore, Save: e.save.place}
	}
	slices.Sort(plan.Reset)
	p.inflight = &inflight{step: p.step, entries: b.entries}
	return plan
}

// runningAtStart copies the running set into a reused buffer, to range
// over while preemptions change the set (clear the copy after).
func (p *Planner) runningAtStart() []*request {
	p.order = append(p.order[:0], p.running...)
	return p.order
}

// scheduleDecode schedules every running request with one token left.
func (p *Planner) scheduleDecode(b *builder) {
	order := p.runningAtStart()
	defer clear(order)
	for _, r := range order {
		if b.rows >= p.cfg.MaxRows {
			return
		}
		if !r.running || r.remaining() != 1 {
			continue
		}
		if p.maybeGrow(b, r, r.computed+1) {
			b.add(r, 1, false)
		}
	}
}

// scheduleRunningPrefill continues the prefill of running requests.
func (p *Planner) scheduleRunningPrefill(b *builder) {
	order := p.runningAtStart()
	defer clear(order)
	for _, r := range order {
		if b.rows >= p.cfg.MaxRows || b.budget <= 0 {
			return
		}
		if !r.running || r.remaining() < 2 {
			continue
		}
		n := p.chunkLen(r, b.budget)
		if p.maybeGrow(b, r, r.computed+n) {
			b.add(r, n, true)
		}
	}
}

// admit admits waiting requests, strictly FCFS, while a slot is free and the
// first chunk's pages can be allocated. With the prefix cache a request
// starts after its longest cached prefix (see resume).
func (p *Planner) admit(b *builder) {
	for len(p.waiting) > 0 && b.rows < p.cfg.MaxRows && b.budget > 0 && len(p.freeSlots) > 0 {
		r := p.waiting[0]
		restore := p.resume(r)
		n := p.chunkLen(r, b.budget)
		need := p.pagesFor(r.computed+n) - len(r.pages)
		if need > p.available() {
			p.unresume(r)
			return
		}
		p.waiting = slices.Delete(p.waiting, 0, 1)
		r.running = true
		r.slot = p.freeSlots.pop()
		r.admission = p.nextAdmission
		p.nextAdmission++
		for range need {
			r.pages = append(r.pages, p.takePage())
		}
		p.running = append(p.running, r)
		p.countQuery(r)
		b.add(r, n, true).restore = restore
		b.reset = append(b.reset, r.slot)
	}
}

// maybeGrow extends r's page table to cover n tokens. While too few pages
// are free it preempts running requests admitted after r, youngest first.
// When even preempting all of them would not free enough pages, it preempts
// none and reports false: r is not scheduled this step and keeps its pages
// until an older request preempts it or pages are released. The oldest
// running request therefore always gets its pages (Add guarantees a request
// fits alone), and a younger request never evicts an older one.
func (p *Planner) maybeGrow(b *builder, r *request, n int) bool {
	need := p.pagesFor(n) - len(r.pages)
	if need > p.available() {
		i := slices.Index(p.running, r)
		if need > p.available()+p.reclaimable(p.running[i+1:]) {
			return false
		}
		for need > p.available() {
			victim := p.running[len(p.running)-1]
			b.drop(victim)
			p.requeue(victim)
			p.preemptions++
			b.preempted = true
		}
	}
	for range need {
		r.pages = append(r.pages, p.takePage())
	}
	return true
}

// Update applies the latest plan after it ran: every sequence advanced by its
// Len, and each id in sampled whose sequence had Sample set got one new
// token. A plan other than the latest, or one already applied, is ignored;
// so are sequences whose request was aborted, finished or requeued since.
// Whether a new token ends its request is the caller's to decide (Finish).
func (p *Planner) Update(plan Plan, sampled []RequestID) {
	f := p.inflight
	if f == nil || plan.Step != f.step {
		return
	}
	p.inflight = nil
	p.markSampled(f.entries, sampled)
	for _, e := range f.entries {
		r := e.r
		if !r.running || r.admission != e.admission || r.computed != e.cached {
			p.applied(e, false)
			continue
		}
		r.computed += e.len
		if e.sample && e.got {
			r.known++
		}
		p.applied(e, true)
	}
	p.recycle(f)
}

// markSampled sets got on each entry whose request's id is in sampled.
// The entries are distinct live requests (so their ids differ), and a
// caller that lists the ids in plan order has them matched in one walk;
// otherwise each id is looked up, and a live request is the one with its
// id, so marking the requests the ids name is a set of the ids.
func (p *Planner) markSampled(entries []entry, sampled []RequestID) {
	j := 0
	for i := range entries {
		e := &entries[i]
		if e.got = e.sample && j < len(sampled) && sampled[j] == e.r.id; e.got {
			j++
		}
	}
	if j == len(sampled) {
		return // every id matched an entry: the others are not named
	}
	p.updates++
	for _, id := range sampled {
		if r, ok := p.reqs[id]; ok {
			r.sampledIn = p.updates
		}
	}
	for i := range entries {
		e := &entries[i]
		e.got = e.r.sampledIn == p.updates
	}
}

// recycle keeps the entries of a plan that is done with for the next one.
func (p *Planner) recycle(f *inflight) {
	clear(f.entries)
	p.spare = f.entries[:0]
}
