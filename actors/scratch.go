package actors

import (
	"fmt"
	"log"

	"cohort/kernels"
	"cohort/model"
)

// The step scratch of a rank whose backend keeps a scratch arena in device
// memory of its own (the CUDA backend). After the weights load and before
// the request state is sized, the rank runs the largest step the engine
// may send it once, on a throwaway state, reads how much of the arena the
// step took, and reserves that (scratchReservation) as one allocation. The
// device's free memory it then reads, and so an unset budget, leaves the
// scratch out, and the arena does not grow while serving. A backend
// without a device arena (the CPU's) skips all of it.

// maxStep is the largest step an engine of cfg sends a rank: a prefill
// budget of MaxPrefillTokens beside MaxRows-1 decode rows, and as output
// rows one per sequence beside one chunk of a request with prompt logprobs
// (promptLogprobRows, every row of which is an output). Both are 0 when the
// step limits are unset.
func maxStep(cfg *Config) (tokens, outputs int) {
	if cfg.MaxPrefillTokens < 1 || cfg.MaxRows < 1 {
		return 0, 0
	}
	tokens = cfg.MaxPrefillTokens + cfg.MaxRows - 1
	return tokens, min(tokens, cfg.MaxRows-1+promptLogprobRows(cfg.Checkpoint.Config.VocabSize))
}

// probeStep is the step whose scratch measureScratch reads: one sequence
// of in.MaxStepTokens tokens that ends at in.MaxModelLen (so its attention
// reads the longest page list a step can bring), the last
// in.MaxStepOutputs rows sampled. Its page list cycles over pages distinct
// pages, as many as its rows write into, so a cache of that many pages
// holds it; the cached positions it reads are whatever those pages hold.
func probeStep(in model.CapacityInput) (tokens []int32, b *kernels.Batch, rows []int, pages int) {
	n, ps := in.MaxStepTokens, in.PageSize
	cached := max(0, in.MaxModelLen-n)
	list := make([]int32, (cached+n+ps-1)/ps)
	pages = min(len(list), (n+ps-1)/ps+1)
	for i := range list {
		list[i] = int32(i % pages)
	}
	b = &kernels.Batch{Positions: make([]int32, n),
		Seqs: []kernels.Seq{{Slot: 0, Start: 0, Len: n, Cached: cached, Pages: list}}}
	for i := range b.Positions {
		b.Positions[i] = int32(cached + i)
	}
	for r := n - min(max(in.MaxStepOutputs, 1), n); r < n; r++ {
		rows = append(rows, r)
	}
	return make([]int32, n), b, rows, pages
}

// measureScratch runs probeStep once on a throwaway state of one slot (freed
// after) and returns the bytes of be's arena the step took, the device
// sampler's argmax and draws of its logits included (probeDraws).
func measureScratch(be kernels.Backend, arena kernels.ScratchArena, m model.Model, in model.CapacityInput) (int64, error) {
	tokens, b, rows, pages := probeStep(in)
	st := m.NewState(be, 1, pages, in.PageSize)
	defer model.FreeState(be, st)
	arena.ResetScratch()
	defer arena.ResetScratch() // before the state is freed
	logits, err := m.Forward(be, st, tokens, b, rows)
	if err != nil {
		return 0, err
	}
	if ds, ok := be.(kernels.DeviceSampler); ok {
		ds.Argmax(logits)
		ds.Sample(logits, probeDraws(len(rows)))
	}
	used, _ := arena.ScratchBytes()
	be.Download(be.SelectRows(logits, []int{0})) // waits for the step: its faults are the probe's
	return used, nil
}

// probeDraws describes n output rows for the probe's Sample as the rows
// that take the most of a device sampler's scratch: each a draw at a
// temperature (the CUDA sampler keeps a float64 copy of such a row) with
// the most alternatives.
func probeDraws(n int) []kernels.SampleRow {
	rows := make([]kernels.SampleRow, n)
	for i := range rows {
		rows[i] = kernels.SampleRow{Temperature: 1, TopN: kernels.MaxSampleTopN}
	}
	return rows
}

// scratchMargin is the share of the measured scratch that its reservation
// adds (an eighth) for what a real step of the same size takes beyond the
// probe's one sequence: the page lists and metadata of many sequences.
const scratchMargin = 8

// scratchAlign is what a reservation is rounded up to.
const scratchAlign = 2 << 20

// scratchReservation is the arena reserved for a step that measured used
// bytes: those and an eighth, rounded up to 2 MiB (0 for 0).
func scratchReservation(used int64) int64 {
	n := used + used/scratchMargin
	return (n + scratchAlign - 1) / scratchAlign * scratchAlign
}

// reserveScratch measures the scratch of the largest step (in.MaxStepTokens)
// on a backend that keeps a scratch arena in device memory of its own and
// reserves it there; it returns the bytes reserved, 0 where the backend
// needs none (no MemoryReporter or ScratchArena, as on the CPU) or no step
// size is known.
func reserveScratch(be kernels.Backend, m model.Model, in model.CapacityInput) (int64, error) {
	arena, ok := be.(kernels.ScratchArena)
	if _, device := be.(kernels.MemoryReporter); !ok || !device || in.MaxStepTokens < 1 {
		return 0, nil
	}
	used, err := measureScratch(be, arena, m, in)
	if err != nil {
		return 0, fmt.Errorf("actors: measuring the scratch of a %d-token step: %w", in.MaxStepTokens, err)
	}
	bytes := scratchReservation(used)
	if err := arena.ReserveScratch(bytes); err != nil {
		return 0, fmt.Errorf("actors: reserving %d B of scratch for a %d-token step: %w", bytes, in.MaxStepTokens, err)
	}
	return bytes, nil
}

// scratchWatch reports, once per rank, a step that grew the scratch arena
// past its reservation: the measured step fell short of a real one, and
// the growth came out of the runtime reserve. Only executor jobs use it.
type scratchWatch struct {
	rank     int
	reserved int64 // 0: nothing reserved, nothing to watch
	warned   bool
}

// check looks at the arena after a step of tokens tokens was reset.
func (w *scratchWatch) check(be kernels.Backend, tokens int) {
	arena, ok := be.(kernels.ScratchArena)
	if w == nil || w.reserved == 0 || w.warned || !ok {
		return
	}
	if _, capacity := arena.ScratchBytes(); capacity > w.reserved {
		w.warned = true
		log.Printf("actors: rank %d: a step of %d tokens grew the scratch arena to %d B, past the %d B reserved for the largest step",
			w.rank, tokens, capacity, w.reserved)
	}
}
