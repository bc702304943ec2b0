package cuda

// The cases of the device sampler's test (sample_test.go, tag cuda) and
// the checks of its host side that need no GPU. This file has no build
// tag: the cases are plain model/sample calls.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"

	"cohort/kernels"
	"cohort/model/sample"
)

// sampleBatch is one call of Sample: rows of logits with their
// descriptions, and what model/sample gives for each.
type sampleBatch struct {
	vocab  int
	logits []float32 // [len(rows), vocab]
	rows   []kernels.SampleRow
	want   []kernels.SampleResult
	desc   []string // each row's parameters, for failures
}

// sampleDraw is one row's sampling as a request sets it up.
type sampleDraw struct {
	p        sample.Params
	step     int
	history  *sample.History
	topN     int
	logprobs bool
	score    bool // prompt logprobs: the row scores target
	target   int32
}

// hostRow describes d for a DeviceSampler and returns what model/sample
// gives for it over raw: PickWithHistory (Draw without logprobs) or Score.
func hostRow(raw []float32, d sampleDraw) (kernels.SampleRow, kernels.SampleResult) {
	if d.score {
		return kernels.SampleRow{Score: true, Target: d.target, TopN: d.topN}, deviceOf(sample.Score(raw, d.target, d.topN))
	}
	p := d.p
	row := kernels.SampleRow{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP, Logprobs: d.logprobs, TopN: d.topN}
	if p.Temperature > 0 {
		row.U = p.Uniform(d.step)
	}
	for _, a := range sample.Adjustments(p, d.step, d.history, len(raw)) {
		j := kernels.LogitAdjust{ID: a.ID, Scale: a.Scale, Subtract: a.Subtract, Bias: a.Bias}
		for _, m := range opPairs {
			if a.Ops&m.host != 0 {
				j.Ops |= m.device
			}
		}
		row.Adjust = append(row.Adjust, j)
	}
	if !d.logprobs && d.topN == 0 {
		return row, kernels.SampleResult{Token: kernels.TokenLogprob{ID: sample.Draw(raw, p, d.step, d.history, nil)}}
	}
	return row, deviceOf(sample.PickWithHistory(raw, p, d.step, d.topN, d.history, nil))
}

// opPairs are model/sample's adjustment operations and the kernels'.
var opPairs = [...]struct {
	host   sample.AdjustOps
	device kernels.AdjustOps
}{
	{sample.AdjustRepeat, kernels.AdjustRepeat}, {sample.AdjustPenalize, kernels.AdjustPenalize},
	{sample.AdjustBias, kernels.AdjustBias}, {sample.AdjustBan, kernels.AdjustBan},
}

func deviceOf(r sample.Result) kernels.SampleResult {
	out := kernels.SampleResult{Token: kernels.TokenLogprob{ID: r.Token.ID, Logprob: r.Token.Logprob}}
	for _, t := range r.Top {
		out.Top = append(out.Top, kernels.TokenLogprob{ID: t.ID, Logprob: t.Logprob})
	}
	return out
}

// logitRow returns a random row of logits of one of the kinds the device
// must handle like the host: plain normal, coarse (many exact ties),
// masked (a third -Inf), very negative tails, all equal, peaked.
func logitRow(r *rand.Rand, vocab int, kind int) []float32 {
	row := make([]float32, vocab)
	for i := range row {
		row[i] = float32(r.NormFloat64() * 3)
	}
	switch kind % 6 {
	case 1: // ties: multiples of 0.5, so thousands share a logit
		for i := range row {
			row[i] = float32(math.Round(float64(row[i])*2) / 2)
		}
	case 2: // a third banned by a grammar-like mask
		for i := range row {
			if r.IntN(3) == 0 {
				row[i] = float32(math.Inf(-1))
			}
		}
	case 3: // a very negative tail, whose probabilities underflow to 0
		for i := range row {
			if r.IntN(2) == 0 {
				row[i] = -1e30
			}
		}
	case 4: // all equal: every draw is a tie
		for i := range row {
			row[i] = 1.25
		}
	case 5: // peaked: a few tokens hold nearly all the mass
		for range 5 {
			row[r.IntN(vocab)] = 25 + float32(r.NormFloat64())
		}
	}
	return row
}

// sampleParams is the menu of parameters the cases draw from: temperature
// alone, with each filter and their combinations, penalties over a
// history, logit bias, min_tokens bans, greedy with adjustments.
func sampleParams(r *rand.Rand, vocab int) sample.Params {
	temps := []float64{0.3, 0.7, 1, 1.5}
	p := sample.Params{Temperature: temps[r.IntN(len(temps))], Seed: r.Uint64()}
	switch r.IntN(12) {
	case 0: // temperature alone
	case 1:
		p.TopK = []int{1, 5, 50, 1000}[r.IntN(4)]
	case 2:
		p.TopP = []float64{0.5, 0.9, 0.99}[r.IntN(3)]
	case 3:
		p.MinP = []float64{0.05, 0.2}[r.IntN(2)]
	case 4:
		p.TopK, p.TopP = []int{5, 50, 1000, 3000}[r.IntN(4)], []float64{0.5, 0.9, 0.99}[r.IntN(3)]
	case 5:
		p.TopK, p.MinP, p.TopP = []int{20, 1000}[r.IntN(2)], 0.05, 0.95
	case 6:
		p.MinP, p.TopP = []float64{0.05, 0.2}[r.IntN(2)], 0.9
	case 7:
		p.PresencePenalty, p.FrequencyPenalty, p.RepetitionPenalty = 1.5, 0.7, 1.3
	case 8:
		p.LogitBias = []sample.TokenBias{{ID: int32(r.IntN(vocab)), Bias: 30}}
		p.TopP = 0.9
	case 9:
		p.MinTokens, p.StopIDs = 100, []int32{0, int32(vocab - 1), int32(r.IntN(vocab))}
	case 10: // greedy with a bias and penalties
		p.Temperature, p.RepetitionPenalty = 0, 1.8
		p.LogitBias = []sample.TokenBias{{ID: int32(r.IntN(vocab)), Bias: 5}}
	case 11: // greedy with the stops banned
		p.Temperature, p.MinTokens, p.StopIDs = 0, 1000, []int32{int32(r.IntN(vocab))}
	}
	if p.TopK > vocab {
		p.TopK = vocab + r.IntN(3) // at and beyond the vocabulary: no cut
	}
	slices.SortFunc(p.LogitBias, func(a, b sample.TokenBias) int { return int(a.ID) - int(b.ID) })
	return p
}

// randomHistory returns a history of prompt and generated tokens, the
// generated ones repeating.
func randomHistory(r *rand.Rand, vocab int) *sample.History {
	prompt := make([]int32, 200)
	for i := range prompt {
		prompt[i] = int32(r.IntN(vocab))
	}
	gen := make([]int32, 60)
	for i := range gen {
		gen[i] = int32(r.IntN(min(vocab, 50)))
	}
	return sample.NewHistory(prompt, gen)
}

// sampleBatchOf makes a batch of size rows of vocab logits with random
// kinds, parameters, steps and logprob requests (some rows score a prompt
// token instead of drawing).
func sampleBatchOf(r *rand.Rand, vocab, size int) sampleBatch {
	var raws [][]float32
	var draws []sampleDraw
	for range size {
		raws = append(raws, logitRow(r, vocab, r.IntN(6)))
		d := sampleDraw{p: sampleParams(r, vocab), step: r.IntN(50)}
		if d.p.Penalized() {
			d.history = randomHistory(r, vocab)
		}
		switch r.IntN(6) {
		case 0:
			d.logprobs = true
		case 1:
			d.topN = 1 + r.IntN(kernels.MaxSampleTopN)
		case 2:
			d.score, d.target, d.topN = true, int32(r.IntN(vocab)), r.IntN(6)
		}
		draws = append(draws, d)
	}
	return hostBatch(vocab, raws, draws)
}

// hostBatch is the batch of rows raws drawn as draws, with model/sample's
// results (the rows are independent, so they are computed in parallel).
func hostBatch(vocab int, raws [][]float32, draws []sampleDraw) sampleBatch {
	b := sampleBatch{vocab: vocab, rows: make([]kernels.SampleRow, len(draws)), want: make([]kernels.SampleResult, len(draws))}
	var wg sync.WaitGroup
	for i, d := range draws {
		wg.Go(func() { b.rows[i], b.want[i] = hostRow(raws[i], d) })
		b.logits = append(b.logits, raws[i]...)
		b.desc = append(b.desc, fmt.Sprintf("%+v step %d topN %d logprobs %v score %v", d.p, d.step, d.topN, d.logprobs, d.score))
	}
	wg.Wait()
	return b
}

// checkSampled fails unless got holds the host's tokens and alternatives,
// with logprobs within 1e-6.
func checkSampled(t *testing.T, b sampleBatch, got []kernels.SampleResult) (mismatches int) {
	t.Helper()
	const tol = 1e-6
	near := func(a, b float64) bool { return a == b || math.Abs(a-b) <= tol } // -Inf logprobs are equal
	if len(got) != len(b.want) {
		t.Fatalf("%d results for %d rows", len(got), len(b.want))
	}
	for i, w := range b.want {
		g := got[i]
		bad := g.Token.ID != w.Token.ID || !near(g.Token.Logprob, w.Token.Logprob) || len(g.Top) != len(w.Top)
		for j := range min(len(g.Top), len(w.Top)) {
			bad = bad || g.Top[j].ID != w.Top[j].ID || !near(g.Top[j].Logprob, w.Top[j].Logprob)
		}
		if bad {
			mismatches++
			t.Errorf("vocab %d row %d/%d (%s):\ndevice %+v\nhost   %+v", b.vocab, i, len(b.rows), b.desc[i], g, w)
		}
	}
	return mismatches
}

// TestSampleLayouts: the sampling kernels' constants are the host's (the
// kernel source is read, so this runs without a GPU).
func TestSampleLayouts(t *testing.T) {
	src, err := os.ReadFile("kernels/72_sample.cu")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{
		"SAMPLE_TOPN": sampleTopN, "SAMPLE_THREADS": sampleThreads, "SAMPLE_PREP_THREADS": samplePrepThreads,
		"SAMPLE_BINS": 16, "SAMPLE_GREEDY": sampleGreedy, "SAMPLE_SCORE": sampleScore, "SAMPLE_LOGPROB": sampleLogprob,
		"SAMPLE_REPEAT": sampleRepeat, "SAMPLE_PENALIZE": samplePenalize, "SAMPLE_BIAS": sampleBias, "SAMPLE_BAN": sampleBan,
	} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)`).FindSubmatch(src)
		if m == nil {
			t.Errorf("72_sample.cu defines no %s", name)
			continue
		}
		if got, _ := strconv.Atoi(string(m[1])); got != want {
			t.Errorf("%s is %d in 72_sample.cu, %d here", name, got, want)
		}
	}
	if sampleTopN != kernels.MaxSampleTopN {
		t.Errorf("the device reports %d alternatives, kernels.MaxSampleTopN is %d", sampleTopN, kernels.MaxSampleTopN)
	}
}

// TestEncodeSampleRows: the rows' words are what the kernels read
// (flags, work rows only where a row draws or adjusts, its adjustments
// after the previous rows'), and rows that break the contract are refused.
func TestEncodeSampleRows(t *testing.T) {
	adj := []kernels.LogitAdjust{{ID: 2, Ops: kernels.AdjustRepeat | kernels.AdjustBan, Scale: 1.5}, {ID: 7, Ops: kernels.AdjustBias, Bias: -3}}
	rows := []kernels.SampleRow{
		{Temperature: 0.7, TopK: 5, TopP: 0.9, MinP: 0.1, U: 0.25, TopN: 3},
		{Adjust: adj, Logprobs: true},
		{Score: true, Target: 9, TopN: 2},
		{TopK: 100},
	}
	a := encodeSampleRows("test", rows, 10)
	if len(a.rows) != len(rows)*sampleArgsWords || len(a.adjust) != len(adj)*sampleAdjustWords || a.pslots != 2 {
		t.Fatalf("%d row words, %d adjustment words, %d work rows", len(a.rows), len(a.adjust), a.pslots)
	}
	word := func(r, i int) int32 { return a.rows[r*sampleArgsWords+i] }
	f64 := func(r, i int) float64 {
		return math.Float64frombits(uint64(uint32(word(r, i))) | uint64(uint32(word(r, i+1)))<<32)
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"row 0 temperature, top-p, min-p, u", []float64{f64(0, 0), f64(0, 2), f64(0, 4), f64(0, 6)}, []float64{0.7, 0.9, 0.1, 0.25}},
		{"row 0 top-k, top-n, flags, pslot", []int32{word(0, 8), word(0, 9), word(0, 10), word(0, 14)}, []int32{5, 3, sampleLogprob, 0}},
		{"row 1 flags, adjustments, pslot", []int32{word(1, 10), word(1, 12), word(1, 13), word(1, 14)}, []int32{sampleGreedy | sampleLogprob, 0, 2, 1}},
		{"row 2 flags, target, pslot", []int32{word(2, 10), word(2, 11), word(2, 14)}, []int32{sampleScore | sampleLogprob, 9, -1}},
		{"row 3 top-k (the vocabulary), flags, pslot", []int32{word(3, 8), word(3, 10), word(3, 14)}, []int32{10, sampleGreedy, -1}},
		{"adjustment 0", a.adjust[:5], []int32{2, sampleRepeat | sampleBan, int32(math.Float32bits(1.5)), 0, 0}},
		{"adjustment 1", a.adjust[5:], []int32{7, sampleBias, 0, 0, int32(math.Float32bits(-3))}},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	for _, bad := range []kernels.SampleRow{
		{TopN: kernels.MaxSampleTopN + 1},
		{Score: true, Target: 10},
		{Adjust: []kernels.LogitAdjust{{ID: 10}}},
		{Adjust: []kernels.LogitAdjust{{ID: 3}, {ID: 3}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("row %+v was not refused", bad)
				}
			}()
			encodeSampleRows("test", []kernels.SampleRow{bad}, 10)
		}()
	}
}

// TestSampleCasesAreHosts: a case's description, carried out by
// model/sample from the row alone (DrawFrom with the row's uniform over
// the adjusted logits), is the host's result: the conversion the device
// relies on, checked without a GPU.
func TestSampleCasesAreHosts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, vocab := range []int{7, 300, 5000} {
		b := sampleBatchOf(r, vocab, 40)
		got := make([]kernels.SampleResult, len(b.rows))
		for i, row := range b.rows {
			got[i] = rowOnHost(b.logits[i*vocab:(i+1)*vocab], row)
		}
		checkSampled(t, b, got)
	}
}

// rowOnHost is kernels.SampleRow's meaning carried out by model/sample.
func rowOnHost(raw []float32, row kernels.SampleRow) kernels.SampleResult {
	if row.Score {
		return deviceOf(sample.Score(raw, row.Target, row.TopN))
	}
	work := slices.Clone(raw)
	for _, a := range row.Adjust {
		h := sample.Adjustment{ID: a.ID, Scale: a.Scale, Subtract: a.Subtract, Bias: a.Bias}
		for _, m := range opPairs {
			if a.Ops&m.device != 0 {
				h.Ops |= m.host
			}
		}
		work[a.ID] = h.Apply(work[a.ID])
	}
	id := sample.DrawFrom(work, sample.Params{Temperature: row.Temperature, TopK: row.TopK, TopP: row.TopP, MinP: row.MinP}, row.U)
	if !row.Logprobs && row.TopN == 0 {
		return kernels.SampleResult{Token: kernels.TokenLogprob{ID: id}}
	}
	return deviceOf(sample.Score(raw, id, row.TopN))
}
