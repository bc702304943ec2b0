package actors

import (
	"fmt"

	"cohort/actors/planner"
	"cohort/kernels"
	"cohort/model"
	"cohort/model/sample"
)

// seqCache is a rank's record of the requests admitted to it: what each
// RunStep's diffs apply to. It lives as long as the rank (one group
// generation); a rebuilt group starts empty and the requests come back
// admitted again, so nothing of it has to survive a failure.
type seqCache struct {
	seqs map[planner.RequestID]*seqState // lookup only
	// history: keep each penalized request's token history (the rank that
	// samples does).
	history bool
}

// seqState is one admitted request on a rank.
type seqState struct {
	slot      int
	promptLen int
	computed  int     // tokens whose KV/state this rank holds
	pages     []int32 // the page table, grown by each step's NewPages
	sampling  Sampling
	history   *sample.History // penalized requests on the sampling rank
}

func newSeqCache(history bool) *seqCache {
	return &seqCache{seqs: map[planner.RequestID]*seqState{}, history: history}
}

// drawRow is an OutputRow with what the rank knows of its request.
type drawRow struct {
	OutputRow
	sampling *Sampling
	index    int             // the request's generated-token index (drives the seeded draw)
	history  *sample.History // nil unless penalized
}

// apply takes a step's diffs: it forgets the finished requests, records
// the admitted ones (zeroing their slots in st), and advances every
// sequence by its tokens. It returns the flat batch and the rows to draw.
// A step naming a request that was not admitted is refused.
func (c *seqCache) apply(st model.State, msg *RunStep) (*kernels.Batch, []drawRow, error) {
	for _, id := range msg.Finished {
		delete(c.seqs, id)
	}
	for _, a := range msg.Admitted {
		if err := c.admit(st, a); err != nil {
			return nil, nil, fmt.Errorf("actors: step %d: %w", msg.Step, err)
		}
	}
	b := &kernels.Batch{Positions: make([]int32, 0, len(msg.Tokens)), Seqs: make([]kernels.Seq, len(msg.Seqs))}
	for i, q := range msg.Seqs {
		s := c.seqs[q.ID]
		if s == nil {
			return nil, nil, fmt.Errorf("actors: step %d names request %d, which this rank has not admitted", msg.Step, q.ID)
		}
		start := len(b.Positions)
		if start+q.Len > len(msg.Tokens) {
			return nil, nil, fmt.Errorf("actors: step %d: request %d's %d tokens overrun the step's %d", msg.Step, q.ID, q.Len, len(msg.Tokens))
		}
		s.pages = append(s.pages, q.NewPages...)
		b.Seqs[i] = kernels.Seq{Slot: s.slot, Start: start, Len: q.Len, Cached: s.computed, Pages: s.pages}
		s.advance(msg.Tokens[start : start+q.Len])
		for p := b.Seqs[i].Cached; p < s.computed; p++ {
			b.Positions = append(b.Positions, int32(p))
		}
	}
	rows := make([]drawRow, len(msg.Outputs))
	for i, o := range msg.Outputs {
		s := c.seqs[o.ID]
		if s == nil {
			return nil, nil, fmt.Errorf("actors: step %d samples request %d, which this rank has not admitted", msg.Step, o.ID)
		}
		rows[i] = drawRow{OutputRow: o, sampling: &s.sampling, index: s.computed - s.promptLen, history: s.history}
	}
	return b, rows, nil
}

// admit records an admitted request and prepares its slot: zeroed, then,
// for a request that resumes from the prefix cache, restored from its
// snapshot (before any forward pass of the step).
func (c *seqCache) admit(st model.State, a AdmitSeq) error {
	st.Reset(a.Slot)
	s := &seqState{slot: a.Slot, promptLen: a.PromptLen, sampling: a.Sampling}
	if c.history && a.Sampling.Params.Penalized() {
		s.history = &sample.History{}
	}
	if a.Cached > 0 && a.Restore >= 0 {
		ss, ok := st.(model.SnapshotState)
		if !ok {
			return fmt.Errorf("request %d resumes from snapshot %d, but the state %T keeps none", a.ID, a.Restore, st)
		}
		ss.Restore(a.Restore, a.Slot)
	}
	if s.history != nil && len(a.History) != a.Cached {
		return fmt.Errorf("request %d resumes after %d tokens with a history of %d", a.ID, a.Cached, len(a.History))
	}
	s.advance(a.History)
	s.computed = a.Cached
	c.seqs[a.ID] = s
	return nil
}

// save takes the step's snapshots, after its forward pass.
func (c *seqCache) save(st model.State, msg *RunStep) error {
	if len(msg.Saves) == 0 {
		return nil
	}
	ss, ok := st.(model.SnapshotState)
	if !ok {
		return fmt.Errorf("actors: step %d saves snapshots, but the state %T keeps none", msg.Step, st)
	}
	for _, sv := range msg.Saves {
		s := c.seqs[sv.ID]
		if s == nil {
			return fmt.Errorf("actors: step %d saves request %d, which this rank has not admitted", msg.Step, sv.ID)
		}
		ss.Save(s.slot, sv.Place)
	}
	return nil
}

// advance records tokens computed for the sequence: its count and, for a
// penalized request, its history (each token is fed once, in order, so the
// history is the prompt and the output up to the token drawn next).
func (s *seqState) advance(tokens []int32) {
	if s.history != nil {
		for i, id := range tokens {
			if s.computed+i < s.promptLen {
				s.history.AddPrompt(id)
			} else {
				s.history.AddGenerated(id)
			}
		}
	}
	s.computed += len(tokens)
}
