//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/kernels"
	"cohort/model"
	_ "cohort/model/qwen35"
)

// detRun feeds sequences of one model state step by step, each sequence in
// its own slot and pages, and keeps the logits of every position it asked
// for.
type detRun struct {
	t      *testing.T
	be     *Backend
	m      model.Model
	st     model.State
	vocab  int
	cached []int               // tokens each slot holds
	logits []map[int][]float32 // per slot: position → logits
}

const (
	detPageSize = 16
	detSlotPage = 40 // pages a slot owns (640 tokens)
)

func newDetRun(t *testing.T, be *Backend, m model.Model, vocab, slots int) *detRun {
	r := &detRun{t: t, be: be, m: m, vocab: vocab, st: m.NewState(be, slots, slots*detSlotPage, detPageSize),
		cached: make([]int, slots), logits: make([]map[int][]float32, slots)}
	for i := range r.logits {
		r.logits[i] = map[int][]float32{}
	}
	return r
}

// detPart is one sequence's share of a step: its slot, its tokens, and
// whether every one of them gets logits (else only the last).
type detPart struct {
	slot   int
	tokens []int32
	all    bool
}

// step runs the parts as one batch.
func (r *detRun) step(parts ...detPart) {
	r.t.Helper()
	b := &kernels.Batch{}
	var tokens []int32
	var rows, pos []int
	for _, p := range parts {
		start, c := len(tokens), r.cached[p.slot]
		pages := make([]int32, (c+len(p.tokens)+detPageSize-1)/detPageSize)
		for i := range pages {
			pages[i] = int32(p.slot*detSlotPage + i)
		}
		b.Seqs = append(b.Seqs, kernels.Seq{Slot: p.slot, Start: start, Len: len(p.tokens), Cached: c, Pages: pages})
		for i, id := range p.tokens {
			b.Positions = append(b.Positions, int32(c+i))
			tokens = append(tokens, id)
			if p.all || i == len(p.tokens)-1 {
				rows, pos = append(rows, start+i), append(pos, c+i)
			}
		}
	}
	out, err := r.m.Forward(r.be, r.st, tokens, b, rows)
	if err != nil {
		r.t.Fatal(err)
	}
	host := r.be.Download(out)
	r.be.ResetScratch()
	for _, p := range parts {
		r.cached[p.slot] += len(p.tokens)
	}
	slotOf := func(row int) int {
		for _, s := range b.Seqs {
			if row >= s.Start && row < s.Start+s.Len {
				return s.Slot
			}
		}
		return -1
	}
	for i, row := range rows {
		r.logits[slotOf(row)][pos[i]] = host[i*r.vocab : (i+1)*r.vocab]
	}
}

// decode feeds ids one step each to every slot of slots together.
func (r *detRun) decode(ids []int32, slots ...int) {
	for _, id := range ids {
		parts := make([]detPart, len(slots))
		for i, s := range slots {
			parts[i] = detPart{slot: s, tokens: []int32{id}}
		}
		r.step(parts...)
	}
}

// TestDeterministicRows: in deterministic mode a sequence's logits are the
// same bits whether its prompt is prefilled in one step or in chunks of
// odd sizes, whether a token is decoded or prefilled, and whether it shares
// its steps with other sequences (prefilling or decoding) or runs alone.
// The fast mode's differences are logged, not asserted (its kernels choose
// their arithmetic by the step's shape).
func TestDeterministicRows(t *testing.T) {
	gpu(t)
	ck := archtest.Open(t, "small")
	for _, det := range []bool{true, false} {
		be, err := New(Options{Deterministic: det})
		if err != nil {
			t.Fatal(err)
		}
		m := loadOn(t, ck, be)
		vocab := ck.Config.VocabSize
		differ := detDiffers(t, be, m, vocab)
		if det {
			for _, d := range differ {
				t.Errorf("deterministic mode: %s", d)
			}
		} else {
			t.Logf("fast mode: %d of the comparisons differ: %v", len(differ), differ)
		}
		be.Close()
	}
}

// detDiffers runs one prompt and its continuation in five ways and lists
// the comparisons with the first (alone, one prefill, then decode) that
// are not bit-identical.
func detDiffers(t *testing.T, be *Backend, m model.Model, vocab int) []string {
	prompt, cont := archtest.Prompt(300, vocab, 1), archtest.Prompt(8, vocab, 2)
	other, third := archtest.Prompt(180, vocab, 3), archtest.Prompt(77, vocab, 4)
	r := newDetRun(t, be, m, vocab, 7)
	// Slot 0: alone, the prompt in one step (logits of every position),
	// then the continuation decoded.
	r.step(detPart{slot: 0, tokens: prompt, all: true})
	r.decode(cont, 0)
	// Slot 1: the prompt in odd chunks.
	for _, cut := range [][2]int{{0, 1}, {1, 64}, {64, 128}, {128, 229}, {229, 300}} {
		r.step(detPart{slot: 1, tokens: prompt[cut[0]:cut[1]], all: true})
	}
	r.decode(cont, 1)
	// Slot 2: prompt and continuation prefilled together.
	r.step(detPart{slot: 2, tokens: append(slices.Clone(prompt), cont...), all: true})
	// Slots 3-6: batched. Slot 4's prompt is prefilled first; slot 3's
	// prompt is cut in two chunks, each beside another sequence's prefill
	// or decode rows; then 3 decodes beside 4, 5 and 6.
	r.step(detPart{slot: 4, tokens: other})
	r.step(detPart{slot: 3, tokens: prompt[:150], all: true}, detPart{slot: 5, tokens: third})
	r.step(detPart{slot: 4, tokens: cont[:1]}, detPart{slot: 3, tokens: prompt[150:], all: true}, detPart{slot: 6, tokens: third[:40]})
	r.decode(cont, 3, 4, 5)
	ref := r.logits[0]
	var differ []string
	for slot, name := range map[int]string{1: "chunked prefill", 2: "prefill of the continuation", 3: "batched"} {
		for p, want := range ref {
			got, ok := r.logits[slot][p]
			if !ok {
				continue
			}
			if !slices.Equal(got, want) {
				differ = append(differ, fmt.Sprintf("%s at position %d: max |Δ| %.3g", name, p, archtest.MaxAbsDiff(got, want)))
			}
		}
	}
	if len(r.logits[1]) < 300 || len(r.logits[2]) < 308 || len(r.logits[3]) < 300 {
		t.Fatalf("missing logits: %d %d %d", len(r.logits[1]), len(r.logits[2]), len(r.logits[3]))
	}
	slices.Sort(differ)
	return differ
}
