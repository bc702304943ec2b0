package planner

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// chooser supplies the decisions of a workload: a seeded generator for the
// property test, the fuzzer's bytes for FuzzPlanner.
type chooser interface {
	intn(n int) int // in [0, n); n > 0
}

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int { return c.r.IntN(n) }

// byteChooser reads decisions from data; once it runs dry it answers 0.
type byteChooser struct{ data []byte }

func (c *byteChooser) intn(n int) int {
	if len(c.data) == 0 {
		return 0
	}
	v := int(c.data[0])
	c.data = c.data[1:]
	if n > 256 && len(c.data) > 0 {
		v = v<<8 | int(c.data[0])
		c.data = c.data[1:]
	}
	return v % n
}

func (c *byteChooser) dry() bool { return len(c.data) == 0 }

// workload drives a planner with random adds, aborts, finishes and requeues,
// checking every plan against the model (see checker). Requests must end
// within their deadline: no starvation.
type workload struct {
	ch      chooser
	c       *checker
	nextID  RequestID
	log     strings.Builder
	partial bool // sometimes leave Sample seqs out of Update (fuzz only)

	deadline map[RequestID]int // step count by which a live request must have ended
}

func newWorkload(ch chooser, partial bool) (*workload, error) {
	cfg := Config{
		MaxPrefillTokens: 1 + ch.intn(40),
		MaxRows:          1 + ch.intn(8),
		Slots:            1 + ch.intn(6),
		KVPages:          1 + ch.intn(48),
		PageSize:         1 + ch.intn(8),
		MaxModelLen:      2 + ch.intn(100),
	}
	c, err := newChecker(cfg)
	if err != nil {
		return nil, err
	}
	return &workload{ch: ch, c: c, nextID: 1, partial: partial, deadline: map[RequestID]int{}}, nil
}

// liveIDs returns the model's live ids, sorted (never map order).
func (w *workload) liveIDs() []RequestID {
	ids := make([]RequestID, 0, len(w.c.live))
	for id := range w.c.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (w *workload) pick() (RequestID, bool) {
	ids := w.liveIDs()
	if len(ids) == 0 {
		return 0, false
	}
	return ids[w.ch.intn(len(ids))], true
}

func (w *workload) add() error {
	cfg := w.c.cfg
	id := w.nextID
	w.nextID++
	if w.ch.intn(16) == 0 {
		if live, ok := w.pick(); ok {
			id = live // duplicate
		}
	}
	prompt := 1 + w.ch.intn(cfg.MaxModelLen*3/4+1)
	maxNew := 1 + w.ch.intn(cfg.MaxModelLen/2+1)
	if w.ch.intn(32) == 0 {
		prompt = w.ch.intn(3) - 1 // invalid
	}
	maxChunk := 0
	if w.ch.intn(4) == 0 {
		maxChunk = w.ch.intn(6) - 1 // -1 is invalid
	}
	addErr, err := w.c.add(Request{ID: id, PromptLen: prompt, MaxNewTokens: maxNew, MaxChunk: maxChunk})
	if err != nil {
		return err
	}
	if addErr != nil {
		fmt.Fprintf(&w.log, "add %d %d %d: %v\n", id, prompt, maxNew, addErr)
		return nil
	}
	// Bound on the steps to end it: the work of every live request (each
	// may be re-prefilled after a preemption) plus the rows that younger
	// requests can take while it prefills.
	work := 0
	for _, m := range w.c.live {
		work += m.prompt + m.maxNew
	}
	w.deadline[id] = w.c.stepCount + 2*work + cfg.MaxRows*cfg.MaxModelLen + 16
	fmt.Fprintf(&w.log, "add %d %d %d\n", id, prompt, maxNew)
	return nil
}

// mutate runs one random command other than schedule/update.
func (w *workload) mutate() error {
	switch k := w.ch.intn(64); {
	case k < 40:
		return w.add()
	case k < 56:
		id, ok := w.pick()
		if !ok {
			return nil
		}
		ended, err := w.c.end(id, k >= 48)
		fmt.Fprintf(&w.log, "end %d %v\n", id, ended)
		return err
	case k < 62:
		if id, ok := w.pick(); ok {
			w.c.requeue(id)
			fmt.Fprintf(&w.log, "requeue %d\n", id)
		}
	default:
		ids, err := w.c.requeueAll()
		fmt.Fprintf(&w.log, "requeue-all %v\n", ids)
		return err
	}
	return nil
}

// step schedules, maybe interferes before the update, and updates.
func (w *workload) step() (idle bool, err error) {
	plan, err := w.c.schedule()
	if err != nil {
		return false, err
	}
	w.log.WriteString(plan.String() + "\n")
	if w.ch.intn(16) == 0 {
		if err := w.mutate(); err != nil {
			return false, err
		}
	}
	var sampled []RequestID
	all := true
	if w.partial && w.ch.intn(4) == 0 {
		all = false
		for _, s := range plan.Seqs {
			if s.Sample && w.ch.intn(2) == 0 {
				sampled = append(sampled, s.ID)
			}
		}
	}
	fin, err := w.c.update(sampled, all)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(&w.log, "finished %v\n", fin)
	for id := range w.deadline {
		if w.c.live[id] == nil {
			delete(w.deadline, id)
		}
	}
	for _, id := range w.liveIDs() {
		if w.partial {
			break // a request left without its token legitimately stalls
		}
		d, ok := w.deadline[id]
		if ok && w.c.stepCount > d {
			return false, fmt.Errorf("request %d starved: still live at step %d, deadline %d", id, w.c.stepCount, d)
		}
	}
	return len(plan.Seqs) == 0, nil
}

// drain stops adding and runs until every request has ended. Requests left
// waiting for a token that never came (partial updates) are finished.
func (w *workload) drain() error {
	for range 100000 {
		if len(w.c.live) == 0 {
			return nil
		}
		idle, err := w.step()
		if err != nil {
			return err
		}
		if idle {
			for _, id := range w.liveIDs() {
				if _, err := w.c.end(id, true); err != nil {
					return err
				}
			}
		}
	}
	return fmt.Errorf("not drained: %d live", len(w.c.live))
}

func runSeed(seed uint64, steps int) (string, error) {
	ch := randChooser{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	w, err := newWorkload(ch, false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&w.log, "config %+v\n", w.c.cfg)
	for range steps {
		for range ch.intn(4) {
			if err := w.mutate(); err != nil {
				return w.log.String(), err
			}
		}
		if _, err := w.step(); err != nil {
			return w.log.String(), err
		}
	}
	if err := w.drain(); err != nil {
		return w.log.String(), err
	}
	return w.log.String(), nil
}

// TestRandomWorkloads checks the invariants of checker after every step of
// many seeded workloads, that every request ends (no starvation), and that a
// seed always produces the same plans.
func TestRandomWorkloads(t *testing.T) {
	seeds, steps := 200, 300
	if testing.Short() {
		seeds, steps = 40, 150
	}
	for seed := range uint64(seeds) {
		log1, err := runSeed(seed, steps)
		if err != nil {
			t.Fatalf("seed %d: %v\nlast plans:\n%s", seed, err, tail(log1, 40))
		}
		log2, err := runSeed(seed, steps)
		if err != nil {
			t.Fatalf("seed %d (second run): %v", seed, err)
		}
		if log1 != log2 {
			t.Fatalf("seed %d: two runs produced different plans", seed)
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func FuzzPlanner(f *testing.F) {
	f.Add([]byte{7, 2, 3, 10, 3, 60, 0, 5, 9, 0, 7, 3, 200, 200, 1, 0, 2})
	f.Add([]byte("\x01\x00\x00\x00\x00\x10add some requests and schedule them"))
	f.Add([]byte{39, 7, 5, 47, 7, 99, 1, 1, 1, 1, 1, 1, 1, 1, 50, 50, 50, 63, 63, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		ch := &byteChooser{data: data}
		w, err := newWorkload(ch, true)
		if err != nil {
			t.Fatal(err)
		}
		for !ch.dry() {
			if ch.intn(3) == 0 {
				if _, err := w.step(); err != nil {
					t.Fatalf("%v\n%s", err, tail(w.log.String(), 40))
				}
			} else if err := w.mutate(); err != nil {
				t.Fatalf("%v\n%s", err, tail(w.log.String(), 40))
			}
		}
		if err := w.drain(); err != nil {
			t.Fatalf("%v\n%s", err, tail(w.log.String(), 40))
		}
	})
}
