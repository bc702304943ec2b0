package planner

import (
	"errors"
	"fmt"
	"slices"
)

// checker drives a Planner through its public API and keeps an independent
// model of what every plan must look like: who owns which slot and page, how
// much of each request is computed, what the next plan may schedule. Every
// method returns an error on the first broken invariant.
type checker struct {
	cfg   Config
	p     *Planner
	live  map[RequestID]*mreq // requests the model believes are not ended
	order []RequestID         // model's running set, admission order

	slotOwner map[int]RequestID
	pageOwner map[int32]RequestID

	last      Plan   // the latest plan, for update
	lastStep  uint64 // the latest non-empty plan's step
	stepCount int    // non-empty plans so far
}

type mreq struct {
	prompt, maxNew      int
	generated, computed int
	slot                int  // -1 when not holding one
	requeued            bool // requeued since the latest plan; its Freed is due
	pages               []int32
	addedAt             int // stepCount when added
	maxChunk            int // Request.MaxChunk
}

func (m *mreq) known() int { return m.prompt + m.generated }

func newChecker(cfg Config) (*checker, error) {
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &checker{cfg: cfg, p: p, live: map[RequestID]*mreq{},
		slotOwner: map[int]RequestID{}, pageOwner: map[int32]RequestID{}}, nil
}

func (c *checker) pagesFor(n int) int { return (n + c.cfg.PageSize - 1) / c.cfg.PageSize }

// expectReject is the reason Add must give, or "" if it must accept.
func (c *checker) expectReject(r Request) string {
	switch {
	case r.PromptLen < 1 || r.MaxNewTokens < 1 || r.MaxChunk < 0:
		return ReasonInvalid
	case c.live[r.ID] != nil:
		return ReasonDuplicate
	case r.PromptLen+r.MaxNewTokens > c.cfg.MaxModelLen:
		return ReasonContextLength
	case c.pagesFor(r.PromptLen+r.MaxNewTokens) > c.cfg.KVPages:
		return ReasonCapacity
	}
	return ""
}

// add calls Add and checks its verdict; it returns Add's error.
func (c *checker) add(r Request) (error, error) {
	want := c.expectReject(r)
	err := c.p.Add(r)
	if err == nil {
		if want != "" {
			return nil, fmt.Errorf("add %d: accepted, want rejection %q", r.ID, want)
		}
		c.live[r.ID] = &mreq{prompt: r.PromptLen, maxNew: r.MaxNewTokens, slot: -1, addedAt: c.stepCount, maxChunk: r.MaxChunk}
		return nil, nil
	}
	var rej *Rejection
	if !errors.As(err, &rej) || !errors.Is(err, ErrRejected) {
		return err, fmt.Errorf("add %d: error %v is not a *Rejection", r.ID, err)
	}
	if rej.Reason != want || rej.ID != r.ID || rej.Msg == "" {
		return err, fmt.Errorf("add %d: rejection %+v, want reason %q", r.ID, rej, want)
	}
	return err, nil
}

// end is Abort or Finish; the result must say whether the id was live.
func (c *checker) end(id RequestID, finish bool) (bool, error) {
	var ok bool
	if finish {
		ok = c.p.Finish(id)
	} else {
		ok = c.p.Abort(id)
	}
	if want := c.live[id] != nil; ok != want {
		return ok, fmt.Errorf("abort/finish %d = %v, want %v", id, ok, want)
	}
	delete(c.live, id)
	c.order = slices.DeleteFunc(c.order, func(x RequestID) bool { return x == id })
	return ok, nil
}

func (c *checker) requeue(id RequestID) {
	c.p.Requeue(id)
	if m := c.live[id]; m != nil && m.slot >= 0 {
		m.requeued = true
		c.order = slices.DeleteFunc(c.order, func(x RequestID) bool { return x == id })
	}
}

func (c *checker) requeueAll() ([]RequestID, error) {
	got := c.p.RequeueAll()
	for _, m := range c.live {
		if m.slot >= 0 {
			m.requeued = true
		}
	}
	if !slices.Equal(got, c.order) && !(len(got) == 0 && len(c.order) == 0) {
		return got, fmt.Errorf("requeue-all = %v, want running in admission order %v", got, c.order)
	}
	c.order = nil
	return got, nil
}

// schedule calls Schedule and checks the plan against the model.
func (c *checker) schedule() (Plan, error) {
	plan := c.p.Schedule()
	c.last = plan
	if err := c.checkPlan(plan); err != nil {
		return plan, fmt.Errorf("step %d: %w\n%s", plan.Step, err, plan)
	}
	return plan, nil
}

func (c *checker) checkPlan(plan Plan) error {
	st := c.p.Stats()
	if len(plan.Seqs) == 0 {
		if plan.Step != 0 || len(plan.Freed) != 0 || len(plan.Reset) != 0 {
			return fmt.Errorf("empty plan carries data: %+v", plan)
		}
		if st.Waiting != 0 && st.Running == 0 {
			return fmt.Errorf("idle plan with a waiting queue and nothing running: %v", st)
		}
		// Only a request left without its sampled token (a partial update)
		// can hold pages that another running request needs.
		stuck := false
		for _, m := range c.live {
			stuck = stuck || m.slot >= 0 && !m.requeued && m.computed == m.known()
		}
		for id, m := range c.live {
			if !stuck && m.slot >= 0 && !m.requeued && m.computed < m.known() {
				return fmt.Errorf("idle plan while running request %d has %d tokens to compute", id, m.known()-m.computed)
			}
		}
		switch {
		case st.FreePages+st.UsedPages != c.cfg.KVPages:
			return fmt.Errorf("free %d + used %d pages != %d", st.FreePages, st.UsedPages, c.cfg.KVPages)
		case st.Running+st.Waiting != len(c.live):
			return fmt.Errorf("stats running %d + waiting %d != %d live", st.Running, st.Waiting, len(c.live))
		case st.Step != c.lastStep:
			return fmt.Errorf("stats step %d, want %d", st.Step, c.lastStep)
		}
		return nil
	}
	if plan.Step != c.lastStep+1 {
		return fmt.Errorf("step %d follows step %d", plan.Step, c.lastStep)
	}
	c.lastStep = plan.Step
	c.stepCount++

	// Freed: each entry releases a slot its id owned, with all its pages.
	for _, f := range plan.Freed {
		if owner, ok := c.slotOwner[f.Slot]; !ok || owner != f.ID {
			return fmt.Errorf("freed %d slot %d owned by %d (owned=%v)", f.ID, f.Slot, owner, ok)
		}
		delete(c.slotOwner, f.Slot)
		for _, pg := range f.Pages {
			if owner, ok := c.pageOwner[pg]; ok && owner != f.ID {
				return fmt.Errorf("freed %d page %d owned by %d", f.ID, pg, owner)
			}
			delete(c.pageOwner, pg)
		}
		if m := c.live[f.ID]; m != nil && m.slot == f.Slot {
			for _, pg := range m.pages {
				if !slices.Contains(f.Pages, pg) {
					return fmt.Errorf("freed %d leaks page %d", f.ID, pg)
				}
			}
			// preempted or requeued: back to the queue, nothing computed
			m.slot, m.pages, m.computed, m.requeued = -1, nil, 0, false
			c.order = slices.DeleteFunc(c.order, func(x RequestID) bool { return x == f.ID })
		}
	}
	for s, id := range c.slotOwner {
		if m := c.live[id]; m == nil || m.slot != s {
			return fmt.Errorf("slot %d still held by ended or moved request %d", s, id)
		}
	}
	for pg, id := range c.pageOwner {
		if m := c.live[id]; m == nil || !slices.Contains(m.pages, pg) {
			return fmt.Errorf("page %d still held by ended or moved request %d", pg, id)
		}
	}

	rows, prefillTokens := 0, 0
	var assigned []int
	seen := map[RequestID]bool{}
	for _, s := range plan.Seqs {
		m := c.live[s.ID]
		switch {
		case m == nil:
			return fmt.Errorf("seq %d is not a live request", s.ID)
		case seen[s.ID]:
			return fmt.Errorf("seq %d scheduled twice", s.ID)
		case s.Len < 1:
			return fmt.Errorf("seq %d len %d", s.ID, s.Len)
		case s.Cached != m.computed:
			return fmt.Errorf("seq %d cached %d, model computed %d", s.ID, s.Cached, m.computed)
		case s.Cached+s.Len > m.known():
			return fmt.Errorf("seq %d computes %d tokens past the %d known", s.ID, s.Cached+s.Len, m.known())
		case s.Sample != (s.Cached+s.Len == m.known()):
			return fmt.Errorf("seq %d sample=%v with cached+len %d known %d", s.ID, s.Sample, s.Cached+s.Len, m.known())
		case m.maxChunk > 0 && s.Len > m.maxChunk:
			return fmt.Errorf("seq %d chunk of %d tokens over its cap of %d", s.ID, s.Len, m.maxChunk)
		}
		seen[s.ID] = true
		rows++
		if !(s.Len == 1 && s.Sample) {
			prefillTokens += s.Len
		}
		if s.Slot < 0 || s.Slot >= c.cfg.Slots {
			return fmt.Errorf("seq %d slot %d out of range", s.ID, s.Slot)
		}
		if m.slot < 0 {
			if owner, ok := c.slotOwner[s.Slot]; ok {
				return fmt.Errorf("seq %d gets slot %d held by %d", s.ID, s.Slot, owner)
			}
			c.slotOwner[s.Slot] = s.ID
			m.slot = s.Slot
			assigned = append(assigned, s.Slot)
			c.order = append(c.order, s.ID)
		} else if s.Slot != m.slot {
			return fmt.Errorf("seq %d moved from slot %d to %d", s.ID, m.slot, s.Slot)
		}
		if want := c.pagesFor(s.Cached + s.Len); len(s.Pages) != want {
			return fmt.Errorf("seq %d has %d pages for %d tokens, want %d", s.ID, len(s.Pages), s.Cached+s.Len, want)
		}
		if !slices.Equal(s.Pages[:len(m.pages)], m.pages) {
			return fmt.Errorf("seq %d pages %v do not extend %v", s.ID, s.Pages, m.pages)
		}
		for _, pg := range s.Pages[len(m.pages):] {
			if pg < 0 || int(pg) >= c.cfg.KVPages {
				return fmt.Errorf("seq %d page %d out of range", s.ID, pg)
			}
			if owner, ok := c.pageOwner[pg]; ok {
				return fmt.Errorf("seq %d gets page %d held by %d", s.ID, pg, owner)
			}
			c.pageOwner[pg] = s.ID
		}
		m.pages = slices.Clone(s.Pages)
	}
	if rows > c.cfg.MaxRows {
		return fmt.Errorf("%d rows > MaxRows %d", rows, c.cfg.MaxRows)
	}
	if prefillTokens > c.cfg.MaxPrefillTokens {
		return fmt.Errorf("%d prefill tokens > MaxPrefillTokens %d", prefillTokens, c.cfg.MaxPrefillTokens)
	}
	slices.Sort(assigned)
	if !slices.Equal(assigned, plan.Reset) && !(len(assigned) == 0 && len(plan.Reset) == 0) {
		return fmt.Errorf("reset %v, want newly assigned slots %v", plan.Reset, assigned)
	}
	return c.checkStats(st)
}

func (c *checker) checkStats(st Stats) error {
	running := 0
	for _, m := range c.live {
		if m.slot >= 0 {
			running++
		}
	}
	switch {
	case st.FreePages+st.UsedPages != c.cfg.KVPages:
		return fmt.Errorf("free %d + used %d pages != %d", st.FreePages, st.UsedPages, c.cfg.KVPages)
	case st.UsedPages != len(c.pageOwner):
		return fmt.Errorf("stats used pages %d, model %d", st.UsedPages, len(c.pageOwner))
	case st.Running != running || st.Running != len(c.slotOwner):
		return fmt.Errorf("stats running %d, model %d (slots %d)", st.Running, running, len(c.slotOwner))
	case st.FreeSlots != c.cfg.Slots-st.Running:
		return fmt.Errorf("stats free slots %d with %d running of %d", st.FreeSlots, st.Running, c.cfg.Slots)
	case st.Running+st.Waiting != len(c.live):
		return fmt.Errorf("stats running %d + waiting %d != %d live", st.Running, st.Waiting, len(c.live))
	case st.Step != c.lastStep:
		return fmt.Errorf("stats step %d, want %d", st.Step, c.lastStep)
	}
	return nil
}

// update applies the latest plan with the given sampled ids (all Sample seqs
// when all is set) and, as the planner's caller does, finishes the requests
// that reached their MaxNewTokens, in plan order.
func (c *checker) update(sampled []RequestID, all bool) ([]RequestID, error) {
	plan := c.last
	if all {
		sampled = nil
		for _, s := range plan.Seqs {
			if s.Sample {
				sampled = append(sampled, s.ID)
			}
		}
	}
	c.p.Update(plan, sampled)
	var finished []RequestID
	for _, s := range plan.Seqs {
		m := c.live[s.ID]
		if m == nil || m.requeued || m.computed != s.Cached || m.slot != s.Slot {
			continue // ended or requeued since the plan
		}
		m.computed += s.Len
		if s.Sample && slices.Contains(sampled, s.ID) {
			m.generated++
			if m.generated >= m.maxNew {
				if !c.p.Finish(s.ID) {
					return finished, fmt.Errorf("finish %d: the planner does not know it", s.ID)
				}
				finished = append(finished, s.ID)
				delete(c.live, s.ID)
				c.order = slices.DeleteFunc(c.order, func(x RequestID) bool { return x == s.ID })
			}
		}
	}
	c.last = Plan{}
	return finished, nil
}
