package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"cohort/actors"
)

// mixedConfig is the mixed-load measurement (issue 12, item 4): Decoders
// requests decode DecodeTokens tokens each while a prompt of ArrivalTokens
// tokens (max_tokens 1) arrives every Period, once per --max-prefill-tokens
// setting, beside the same decoders without arrivals.
type mixedConfig struct {
	Settings      []int
	Decoders      int
	PromptLen     int
	DecodeTokens  int
	ArrivalTokens int
	Period        time.Duration
}

// mixedResult is one setting's inter-token latencies, idle and loaded.
type mixedResult struct {
	MaxPrefillTokens int     `json:"max_prefill_tokens"`
	Decoders         int     `json:"decoders"`
	DecodeTokens     int     `json:"decode_tokens"`
	ArrivalTokens    int     `json:"arrival_tokens"`
	PeriodMs         float64 `json:"period_ms"`
	Arrivals         int     `json:"arrivals"`
	ArrivalTTFTMs    float64 `json:"arrival_ttft_ms"` // median over the arrivals
	IdleP50Ms        float64 `json:"idle_itl_p50_ms"`
	IdleP99Ms        float64 `json:"idle_itl_p99_ms"`
	LoadedP50Ms      float64 `json:"loaded_itl_p50_ms"`
	LoadedP99Ms      float64 `json:"loaded_itl_p99_ms"`
	P99OverIdle      float64 `json:"loaded_p99_over_idle_p50"` // the bar: ≤ 2 at the smaller setting
}

// engineStarter starts an engine with the given prefill tokens per step.
type engineStarter func(maxPrefill int) (*actors.Engine, error)

// runMixed measures every setting on a fresh engine of its own.
func runMixed(ctx context.Context, start engineStarter, vocab int, c mixedConfig, stdout io.Writer) ([]mixedResult, error) {
	var out []mixedResult
	for _, setting := range c.Settings {
		eng, err := start(setting)
		if err != nil {
			return nil, fmt.Errorf("mixed load, max-prefill-tokens %d: %w", setting, err)
		}
		res, err := measureMixed(ctx, &bencher{eng: eng, vocab: vocab, seq: 1 << 32}, c)
		eng.Close()
		if err != nil {
			return nil, fmt.Errorf("mixed load, max-prefill-tokens %d: %w", setting, err)
		}
		res.MaxPrefillTokens = setting
		out = append(out, res)
		fmt.Fprintf(stdout, "mixed load, max-prefill-tokens %d: %d arrivals, ITL p99 %.2f ms (idle p50 %.2f ms)\n",
			setting, res.Arrivals, res.LoadedP99Ms, res.IdleP50Ms)
	}
	return out, nil
}

// measureMixed runs the decoders once alone, then again with arrivals from
// the moment every decoder has its first token until the last decoder is
// done.
func measureMixed(ctx context.Context, b *bencher, c mixedConfig) (mixedResult, error) {
	res := mixedResult{Decoders: c.Decoders, DecodeTokens: c.DecodeTokens, ArrivalTokens: c.ArrivalTokens, PeriodMs: ms(c.Period)}
	idle, err := b.run(ctx, c.Decoders, c.PromptLen, c.DecodeTokens)
	if err != nil {
		return res, fmt.Errorf("idle decoders: %w", err)
	}
	res.IdleP50Ms, res.IdleP99Ms = itlPercentiles(idle)
	dec, err := b.start(ctx, c.Decoders, c.PromptLen, c.DecodeTokens)
	if err != nil {
		return res, fmt.Errorf("decoders: %w", err)
	}
	dec.firsts.Wait()
	var arrivals []*batchRun
	tick := time.NewTicker(c.Period)
	defer tick.Stop()
	for done := false; !done; {
		a, err := b.start(ctx, 1, c.ArrivalTokens, 1)
		if err != nil {
			dec.cancel()
			return res, fmt.Errorf("arrival: %w", err)
		}
		arrivals = append(arrivals, a)
		select {
		case <-dec.done:
			done = true
		case <-tick.C:
		}
	}
	loaded, err := dec.wait()
	if err != nil {
		return res, fmt.Errorf("decoders: %w", err)
	}
	var ttfts []float64
	for _, a := range arrivals {
		runs, err := a.wait()
		if err != nil {
			return res, fmt.Errorf("arrival: %w", err)
		}
		ttfts = append(ttfts, ms(runs[0].first.Sub(runs[0].submit)))
	}
	slices.Sort(ttfts)
	res.Arrivals, res.ArrivalTTFTMs = len(arrivals), ttfts[len(ttfts)/2]
	res.LoadedP50Ms, res.LoadedP99Ms = itlPercentiles(loaded)
	if res.IdleP50Ms > 0 {
		res.P99OverIdle = res.LoadedP99Ms / res.IdleP50Ms
	}
	return res, nil
}

// itlPercentiles returns the median and 99th percentile of the gaps between
// consecutive tokens of every request (the first token, a prefill's, is
// not a gap).
func itlPercentiles(runs []reqTimes) (p50, p99 float64) {
	var gaps []float64
	for _, r := range runs {
		for i := 1; i < len(r.tokens); i++ {
			gaps = append(gaps, ms(r.tokens[i].Sub(r.tokens[i-1])))
		}
	}
	if len(gaps) == 0 {
		return 0, 0
	}
	slices.Sort(gaps)
	at := func(q float64) float64 { return gaps[min(len(gaps)-1, int(q*float64(len(gaps))))] }
	return at(0.50), at(0.99)
}

func printMixed(w io.Writer, results []mixedResult) {
	if len(results) == 0 {
		return
	}
	r0 := results[0]
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "mixed load (%d decoders × %d tokens; a %d-token prompt every %.0f ms)\tmax-prefill-tokens\tarrivals\tarrival TTFT ms\tidle ITL p50\tidle p99\tloaded ITL p50\tloaded p99\tloaded p99 / idle p50\t\n",
		r0.Decoders, r0.DecodeTokens, r0.ArrivalTokens, r0.PeriodMs)
	for _, r := range results {
		fmt.Fprintf(tw, "\t%d\t%d\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.MaxPrefillTokens, r.Arrivals, r.ArrivalTTFTMs,
			r.IdleP50Ms, r.IdleP99Ms, r.LoadedP50Ms, r.LoadedP99Ms, r.P99OverIdle)
	}
	tw.Flush()
}
