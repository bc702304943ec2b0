package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"cohort/actors"
	"cohort/internal/testmodels/modelgen"
	"cohort/model"
)

// benchReport is what `cohort bench --json` writes.
type benchReport struct {
	What             string         `json:"what"`
	Date             string         `json:"date"`
	Model            string         `json:"model"`
	Preset           string         `json:"preset,omitempty"`
	Device           string         `json:"device"`
	TP               int            `json:"tp"`
	ElemBytes        int            `json:"elem_bytes"`
	GOMAXPROCS       int            `json:"gomaxprocs"`
	PromptLen        int            `json:"prompt_len"`
	DecodeTokens     int            `json:"decode_tokens"`
	MaxPrefillTokens int            `json:"max_prefill_tokens"`
	KVBudgetMiB      int64          `json:"kv_budget_mib"`
	Slots            int            `json:"slots"`
	KVPages          int            `json:"kv_pages"`
	LoadSeconds      float64        `json:"load_s"`
	WeightBytesBF16  int64          `json:"weight_bytes_bf16"`
	StateBytesBF16   int64          `json:"state_bytes_bf16"`
	FloorMsPerToken  float64        `json:"floor_ms_per_token"`
	FloorSource      string         `json:"floor_source"`
	Roofline         modelRoofline  `json:"roofline"`
	HF               *hfBaseline    `json:"hf,omitempty"`
	Decode           []decodeResult `json:"decode"`
	Prefill          []prefillRes   `json:"prefill"`
	TTFT             *ttftResult    `json:"ttft,omitempty"`
	Mixed            []mixedResult  `json:"mixed,omitempty"`
}

type decodeResult struct {
	Batch         int     `json:"batch"`
	MsPerToken    float64 `json:"ms_per_token"`   // decode wall time / steps
	TokPerSec     float64 `json:"tok_per_s"`      // aggregate decode tokens / decode wall time
	Steps         int     `json:"steps"`          // decode steps measured
	DecodeSeconds float64 `json:"decode_s"`       // from all first tokens to the last token
	FloorFraction float64 `json:"floor_fraction"` // floor / ms_per_token
	XFloor        float64 `json:"x_floor"`        // ms_per_token / floor

	BatchFloorMs       float64 `json:"batch_floor_ms"`       // weights + this batch's state and KV traffic
	BatchFloorFraction float64 `json:"batch_floor_fraction"` // batch_floor_ms / ms_per_token
	HFMsPerToken       float64 `json:"hf_ms_per_token,omitempty"`
	HFTokPerSec        float64 `json:"hf_tok_per_s,omitempty"`
	SpeedupVsHF        float64 `json:"speedup_vs_hf,omitempty"` // hf_ms_per_token / ms_per_token
}

type prefillRes struct {
	Tokens        int       `json:"tokens"`
	TTFTMs        float64   `json:"ttft_ms"`  // the median of the timed runs
	RunsMs        []float64 `json:"runs_ms"`  // the timed runs
	FirstMs       float64   `json:"first_ms"` // the first run of the length (whatever its first use costs)
	TokPerSec     float64   `json:"tok_per_s"`
	FloorMs       float64   `json:"floor_ms"`       // roofline: max(weights / bandwidth, FLOPs / peak)
	FloorFraction float64   `json:"floor_fraction"` // floor_ms / ttft_ms
	HFMs          float64   `json:"hf_ms,omitempty"`
	SpeedupVsHF   float64   `json:"speedup_vs_hf,omitempty"` // hf_ms / ttft_ms
}

type ttftResult struct {
	PromptTokens  int       `json:"prompt_tokens"`
	MedianMs      float64   `json:"median_ms"`
	RunsMs        []float64 `json:"runs_ms"`
	FloorMs       float64   `json:"floor_ms"`
	FloorFraction float64   `json:"floor_fraction"`
	HFMedianMs    float64   `json:"hf_median_ms,omitempty"`
	SpeedupVsHF   float64   `json:"speedup_vs_hf,omitempty"`
}

func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	if chatMode(args) {
		return runBenchChat(ctx, args, stdout) // benchchat.go
	}
	fs, run := newPlacementFlagSet("bench", "tensor-parallel degree (ranks)")
	fs.Lookup("model").Usage = "model directory (or use --preset)"
	preset := fs.String("preset", "", "generate this preset into a temporary directory: "+strings.Join(modelgen.PresetNames(), ", "))
	batchList := fs.String("batch", "1,8,32", "decode batch sizes (concurrent requests), comma-separated")
	promptLen := fs.Int("prompt-len", 128, "prompt tokens of each decode request")
	decodeTokens := fs.Int("decode-tokens", 64, "tokens each decode request generates (ignore_eos)")
	stepDeadline := fs.Duration("step-deadline", time.Minute, "a step's replies must all arrive within this (raise it under a profiler such as ncu)")
	prefillList := fs.String("prefill", "1024,8192", "prefill lengths to time (one request, max_tokens 1), comma-separated")
	ttftLen := fs.Int("ttft-len", 1024, "prompt tokens of the TTFT measurement (0: skip)")
	ttftRuns := fs.Int("ttft-runs", 3, "TTFT repetitions (the median is reported)")
	prefillRuns := fs.Int("prefill-runs", 3, "timed repetitions of each --prefill length after its first run (the median is reported beside the first)")
	maxPrefill := fs.Int("max-prefill-tokens", 0, maxPrefillUsage)
	kvBudget := fs.Int("kv-budget-mib", 0, "memory per rank for KV pages and request state, in MiB (0: just enough for the runs)")
	jsonOut := fs.String("json", "", "also write the results as JSON to this file")
	peakTBps := fs.Float64("peak-tbps", defaultPeakTBps, "usable HBM bandwidth in TB/s for the floors (H200: 4.3 usable, 4.8 nominal)")
	peakTFLOPS := fs.Float64("peak-tflops", defaultPeakTFLOPS, "dense bf16 TFLOP/s for the prefill floor (H200: 989 nominal)")
	hfJSON := fs.String("hf-json", "", "HF transformers baseline to print beside each result (tools/hfref/hfbench.py --out)")
	hfDtype := fs.String("hf-dtype", "bf16", "which dtype's results to take from --hf-json")
	mixedList := fs.String("mixed-prefill-tokens", "", "mixed load: --max-prefill-tokens settings to measure decode inter-token latency at while long prompts arrive, comma-separated (empty: skip)")
	mixedDecoders := fs.Int("mixed-decoders", 16, "mixed load: decoding requests")
	mixedTokens := fs.Int("mixed-decode-tokens", 256, "mixed load: tokens each decoding request generates")
	mixedPrompt := fs.Int("mixed-prompt", 8192, "mixed load: prompt tokens of each arriving request (max_tokens 1)")
	mixedPeriod := fs.Duration("mixed-period", time.Second, "mixed load: time between arrivals")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file (the host side: engine, actors, backend calls)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	var mixedSettings []int
	if *mixedList != "" {
		var err error
		if mixedSettings, err = parseInts(*mixedList); err != nil {
			return fmt.Errorf("bench: --mixed-prefill-tokens: %w", err)
		}
		if *mixedDecoders < 1 || *mixedTokens < 2 || *mixedPrompt < 1 || *mixedPeriod <= 0 {
			return errors.New("bench: --mixed-decoders, --mixed-prompt and --mixed-period must be positive, --mixed-decode-tokens at least 2")
		}
	}
	batches, err := parseInts(*batchList)
	if err != nil {
		return fmt.Errorf("bench: --batch: %w", err)
	}
	prefills, err := parseInts(*prefillList)
	if err != nil {
		return fmt.Errorf("bench: --prefill: %w", err)
	}
	*maxPrefill = run.maxPrefill(*maxPrefill)
	switch {
	case (run.dir == "") == (*preset == ""):
		return errors.New("bench: give exactly one of --model and --preset")
	case run.tp < 1 || *promptLen < 1 || *maxPrefill < 1 || *ttftRuns < 1 || *prefillRuns < 1 || *ttftLen < 0 || *kvBudget < 0:
		return errors.New("bench: --tp, --prompt-len, --max-prefill-tokens, --ttft-runs and --prefill-runs must be positive; --ttft-len and --kv-budget-mib not negative")
	case *decodeTokens < 2:
		return errors.New("bench: --decode-tokens must be at least 2 (the first token comes from the prefill)")
	case len(batches) == 0:
		return errors.New("bench: --batch is empty")
	case *peakTBps <= 0 || *peakTFLOPS <= 0:
		return errors.New("bench: --peak-tbps and --peak-tflops must be positive")
	}
	var hf *hfBaseline
	if *hfJSON != "" {
		if hf, err = loadHFBaseline(*hfJSON, *hfDtype); err != nil {
			return fmt.Errorf("bench: --hf-json: %w", err)
		}
	}

	newBackend, lockThread, elemBytes, err := backendFactory(run.device, run.rankThreads())
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}

	modelDir := run.dir
	if *preset != "" {
		p, ok := modelgen.Presets[*preset]
		if !ok {
			return fmt.Errorf("bench: unknown preset %q (have %s)", *preset, strings.Join(modelgen.PresetNames(), ", "))
		}
		tmp, err := os.MkdirTemp("", "cohort-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		fmt.Fprintf(stdout, "generating the %s preset into %s\n", p.Name, tmp)
		if err := modelgen.Write(tmp, p); err != nil {
			return err
		}
		modelDir = tmp
	}
	ck, tok, err := openCheckpoint(modelDir)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer ck.Close()
	cfg := ck.Config
	shard := model.Shard{Rank: 0, Size: run.tp}
	const pageSize = 16
	maxBatch := slices.Max(batches)
	longest := max(*promptLen+*decodeTokens, *ttftLen+1)
	if mixedSettings != nil {
		maxBatch = max(maxBatch, *mixedDecoders+2)
		longest = max(longest, *promptLen+*mixedTokens, *mixedPrompt+1)
	}
	for _, l := range prefills {
		longest = max(longest, l+1)
	}
	maxModelLen := (longest + pageSize - 1) / pageSize * pageSize
	if cfg.MaxPositions > 0 && maxModelLen > cfg.MaxPositions {
		return fmt.Errorf("bench: the runs need %d positions; the model has %d", maxModelLen, cfg.MaxPositions)
	}
	budget := int64(*kvBudget) << 20
	if budget == 0 {
		// Slots take at most half the budget (PlanCapacity), the KV pages the rest.
		size := ck.Arch.StateSize(cfg, shard, elemBytes)
		state := size.SlotBytes
		perReq := int64((*promptLen+*decodeTokens)/pageSize+2) * pageSize
		kvTokens := max(int64(maxBatch)*perReq, int64(maxModelLen+2*pageSize))
		if mixedSettings != nil {
			// The decoders, plus two arrivals in flight at once.
			kvTokens = max(kvTokens, int64(*mixedDecoders)*int64(*promptLen+*mixedTokens+2*pageSize)+2*int64(*mixedPrompt+2*pageSize))
		}
		kv := size.TokenBytes * kvTokens
		budget = 2*max(int64(maxBatch)*state, kv) + 16<<20
	}

	report := &benchReport{
		What: "measured through the engine: actors.Start (scheduler, planner, rank actors, device executor) + the backend; requests submitted through the Go API, times from the request actors' events",
		Date: time.Now().UTC().Format(time.RFC3339), Model: modelDir, Preset: *preset, Device: run.device, TP: run.tp,
		ElemBytes: elemBytes, GOMAXPROCS: runtime.GOMAXPROCS(0), PromptLen: *promptLen, DecodeTokens: *decodeTokens,
		MaxPrefillTokens: *maxPrefill, KVBudgetMiB: budget >> 20,
	}
	if report.Preset == "" {
		report.Preset = checkpointPreset(modelDir)
	}
	report.WeightBytesBF16, err = weightBytesBF16(ck)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	report.StateBytesBF16 = ck.Arch.StateSize(cfg, model.Single, 2).SlotBytes
	if report.Roofline, err = roofline(ck.Arch, ck.Config, *peakTBps, *peakTFLOPS); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	report.FloorMsPerToken = report.Roofline.decodeFloorMs()
	report.FloorSource = fmt.Sprintf("batch-1 decode reads every weight once: %.4g GB in bf16 (embedding only as the tied LM head) / %.3g TB/s; "+
		"the batch floor adds each request's GDN state (read + write) and KV; prefill floors are max(bytes / bandwidth, FLOPs / %.4g TFLOP/s)",
		float64(report.Roofline.WeightBytesRead)/1e9, *peakTBps, *peakTFLOPS)
	report.HF = hf

	fmt.Fprintf(stdout, "starting the engine: %s, device %s, tp %d, budget %d MiB per rank\n", modelDir, run.device, run.tp, budget>>20)
	start := time.Now()
	startEngine := func(maxPrefill int) (*actors.Engine, error) {
		return startOn(ctx, run.device, run.devices, actors.Config{
			Checkpoint: ck, Tokenizer: tok, TP: run.tp, NewBackend: newBackend, LockThread: lockThread,
			Capacity: model.CapacityInput{Budget: budget, ElemBytes: elemBytes, PageSize: pageSize,
				MaxSeqs: max(64, maxBatch), MaxModelLen: maxModelLen},
			MaxPrefillTokens: maxPrefill, MaxRows: max(64, maxBatch), StepDeadline: *stepDeadline,
			DisablePrefixCache: true, // these runs size memory to their requests and measure compute; bench --chat measures the cache
		})
	}
	eng, err := startEngine(*maxPrefill)
	if err != nil {
		return fmt.Errorf("bench: starting the engine: %w", err)
	}
	defer eng.Close()
	report.LoadSeconds = time.Since(start).Seconds()
	info := eng.Info()
	report.Slots, report.KVPages = info.Slots, info.KVPages
	if info.Slots < maxBatch {
		return fmt.Errorf("bench: the engine holds %d concurrent requests, batch %d needs more: raise --kv-budget-mib", info.Slots, maxBatch)
	}
	fmt.Fprintf(stdout, "engine ready in %.1fs (slots %d, kv pages %d)\n", report.LoadSeconds, info.Slots, info.KVPages)

	b := &bencher{eng: eng, vocab: min(info.VocabSize, 256)}
	// Warm-up: one request of the decode shape, then the largest batch with
	// short prompts (kernels compiled, GEMM heuristics and caches settled).
	if _, err := b.run(ctx, 1, *promptLen, 4); err != nil {
		return fmt.Errorf("bench: warm-up: %w", err)
	}
	if _, err := b.run(ctx, maxBatch, 16, 3); err != nil {
		return fmt.Errorf("bench: warm-up: %w", err)
	}
	// A prompt of a full prefill step: the engine sizes prefill steps from
	// the largest step it has measured (at most 8× it), so without this the
	// first timed prefill would be split into smaller warm-up steps.
	if len(prefills) > 0 {
		if _, err := b.run(ctx, 1, min(slices.Max(prefills), *maxPrefill), 1); err != nil {
			return fmt.Errorf("bench: warm-up: %w", err)
		}
	}
	fmt.Fprintf(stdout, "warm-up done (%.1fs)\n", time.Since(start).Seconds()-report.LoadSeconds)

	for _, n := range batches {
		runs, err := b.run(ctx, n, *promptLen, *decodeTokens)
		if err != nil {
			return fmt.Errorf("bench: decode batch %d: %w", n, err)
		}
		d := decodeStats(runs)
		d.Batch = n
		d.FloorFraction = report.FloorMsPerToken / d.MsPerToken
		d.XFloor = d.MsPerToken / report.FloorMsPerToken
		d.BatchFloorMs = report.Roofline.batchFloorMs(n, float64(*promptLen)+float64(*decodeTokens)/2)
		d.BatchFloorFraction = d.BatchFloorMs / d.MsPerToken
		if hf != nil {
			d.HFMsPerToken, d.HFTokPerSec = hf.decodeMs[n], hf.decodeTok[n]
			d.SpeedupVsHF = speedup(d.HFMsPerToken, d.MsPerToken)
		}
		report.Decode = append(report.Decode, d)
		fmt.Fprintf(stdout, "decode batch %d: %.3f ms/token, %.1f tok/s\n", n, d.MsPerToken, d.TokPerSec)
	}
	for _, l := range prefills {
		p := prefillRes{Tokens: l, FloorMs: report.Roofline.prefillFloorMs(l)}
		for i := range 1 + *prefillRuns {
			runs, err := b.run(ctx, 1, l, 1)
			if err != nil {
				return fmt.Errorf("bench: prefill %d: %w", l, err)
			}
			if t := ms(runs[0].first.Sub(runs[0].submit)); i == 0 {
				p.FirstMs = t
			} else {
				p.RunsMs = append(p.RunsMs, t)
			}
		}
		p.TTFTMs = median(p.RunsMs)
		p.TokPerSec = float64(l) / (p.TTFTMs / 1e3)
		p.FloorFraction = p.FloorMs / p.TTFTMs
		if hf != nil {
			p.HFMs = hf.prefillMs[l]
			p.SpeedupVsHF = speedup(p.HFMs, p.TTFTMs)
		}
		report.Prefill = append(report.Prefill, p)
		fmt.Fprintf(stdout, "prefill %d: TTFT %.1f ms (median of %d; first run %.1f ms), %.1f tok/s\n", l, p.TTFTMs, len(p.RunsMs), p.FirstMs, p.TokPerSec)
	}
	if *ttftLen > 0 {
		t := &ttftResult{PromptTokens: *ttftLen}
		for range *ttftRuns {
			runs, err := b.run(ctx, 1, *ttftLen, 1)
			if err != nil {
				return fmt.Errorf("bench: ttft: %w", err)
			}
			t.RunsMs = append(t.RunsMs, ms(runs[0].first.Sub(runs[0].submit)))
		}
		t.MedianMs = median(t.RunsMs)
		t.FloorMs = report.Roofline.prefillFloorMs(*ttftLen)
		t.FloorFraction = t.FloorMs / t.MedianMs
		if hf != nil {
			t.HFMedianMs = hf.ttftMs[*ttftLen]
			t.SpeedupVsHF = speedup(t.HFMedianMs, t.MedianMs)
		}
		report.TTFT = t
	}

	if mixedSettings != nil {
		eng.Close() // each setting gets an engine of its own
		mc := mixedConfig{Settings: mixedSettings, Decoders: *mixedDecoders, PromptLen: *promptLen, DecodeTokens: *mixedTokens,
			ArrivalTokens: *mixedPrompt, Period: *mixedPeriod}
		if report.Mixed, err = runMixed(ctx, startEngine, b.vocab, mc, stdout); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}

	printReport(stdout, report)
	if *jsonOut != "" {
		data, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	return nil
}

// bencher submits synthetic requests to a running engine.
type bencher struct {
	eng   *actors.Engine
	vocab int // prompt ids are drawn from [0, vocab)
	seq   uint64
}

// reqTimes is one request's timeline: submit, first token, and every token.
type reqTimes struct {
	submit time.Time
	first  time.Time
	tokens []time.Time
}

// run submits n concurrent requests of promptLen tokens, each generating
// maxTokens tokens (EOS ignored), and waits for all of them.
func (b *bencher) run(ctx context.Context, n, promptLen, maxTokens int) ([]reqTimes, error) {
	r, err := b.start(ctx, n, promptLen, maxTokens)
	if err != nil {
		return nil, err
	}
	return r.wait()
}

// batchRun is a batch of requests in flight: firsts is done once every
// request has its first token (or ended), done is closed when all ended.
type batchRun struct {
	out     []reqTimes
	errs    []error
	streams []*actors.Stream
	firsts  sync.WaitGroup
	done    chan struct{}
}

// start submits n concurrent requests as run does and returns without
// waiting for them.
func (b *bencher) start(ctx context.Context, n, promptLen, maxTokens int) (*batchRun, error) {
	r := &batchRun{out: make([]reqTimes, n), errs: make([]error, n), streams: make([]*actors.Stream, n), done: make(chan struct{})}
	for i := range n {
		b.seq++
		rng := rand.New(rand.NewPCG(b.seq, 0xbe9c4))
		prompt := make([]int32, promptLen)
		for j := range prompt {
			prompt[j] = int32(rng.IntN(b.vocab))
		}
		r.out[i].submit = time.Now()
		s, err := b.eng.Submit(actors.Request{Prompt: prompt, MaxTokens: maxTokens, IgnoreEOS: true})
		if err != nil {
			for _, s := range r.streams[:i] {
				s.Cancel()
			}
			return nil, err
		}
		r.streams[i] = s
	}
	var wg sync.WaitGroup
	r.firsts.Add(n)
	for i, s := range r.streams {
		wg.Go(func() { r.errs[i] = r.collect(ctx, i, s, maxTokens) })
	}
	go func() {
		wg.Wait()
		close(r.done)
	}()
	return r, nil
}

// collect records request i's token times until its stream ends.
func (r *batchRun) collect(ctx context.Context, i int, s *actors.Stream, maxTokens int) error {
	first := sync.OnceFunc(r.firsts.Done)
	defer first()
	for {
		ev, err := s.Recv(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			s.Cancel()
			return err
		}
		if ev.Finish == "error" || ev.Finish == "cancelled" {
			return fmt.Errorf("request ended with %q: %v", ev.Finish, ev.Err)
		}
		if ev.HasToken {
			r.out[i].tokens = append(r.out[i].tokens, ev.Time)
			first()
		}
	}
	if len(r.out[i].tokens) != maxTokens {
		return fmt.Errorf("request got %d tokens, want %d", len(r.out[i].tokens), maxTokens)
	}
	r.out[i].first = r.out[i].tokens[0]
	return nil
}

// wait returns the requests' times once all of them ended.
func (r *batchRun) wait() ([]reqTimes, error) {
	<-r.done
	return r.out, errors.Join(r.errs...)
}

// cancel ends every request of the batch and waits for them.
func (r *batchRun) cancel() {
	for _, s := range r.streams {
		s.Cancel()
	}
	<-r.done
}

// decodeStats measures the decode phase of a batch: from the moment every
// request had its first token until the last token. Steps are the tokens
// the last request produced in that window (one per engine step).
func decodeStats(runs []reqTimes) decodeResult {
	var t0, t1 time.Time
	for _, r := range runs {
		if r.first.After(t0) {
			t0 = r.first
		}
		if last := r.tokens[len(r.tokens)-1]; last.After(t1) {
			t1 = last
		}
	}
	steps, tokens := 0, 0
	for _, r := range runs {
		n := 0
		for _, t := range r.tokens {
			if t.After(t0) {
				n++
			}
		}
		steps, tokens = max(steps, n), tokens+n
	}
	d := t1.Sub(t0)
	res := decodeResult{Steps: steps, DecodeSeconds: d.Seconds()}
	if steps > 0 && d > 0 {
		res.MsPerToken = ms(d) / float64(steps)
		res.TokPerSec = float64(tokens) / d.Seconds()
	}
	return res
}

func printReport(w io.Writer, r *benchReport) {
	fmt.Fprintf(w, "\ncohort bench: %s, device %s (%d-byte elements), tp %d — measured through the engine (actors + planner + backend)\n",
		r.Model, r.Device, r.ElemBytes, r.TP)
	fmt.Fprintf(w, "floor %.4g ms/token: %s\n", r.FloorMsPerToken, r.FloorSource)
	if r.HF != nil {
		fmt.Fprintf(w, "HF baseline: %s, transformers %s, torch %s, %s (%s); ×HF = HF time / cohort time (> 1: cohort faster)\n",
			r.HF.Dtype, r.HF.Transformers, r.HF.Torch, r.HF.GPU, r.HF.Source)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "decode (prompt %d, %d tokens)\tbatch\tms/token\ttok/s\tsteps\tfloor ms\t×floor\tfloor/measured\tbatch floor ms\tbatch floor/measured\tHF ms/token\tHF tok/s\t×HF\t\n", r.PromptLen, r.DecodeTokens)
	for _, d := range r.Decode {
		fmt.Fprintf(tw, "\t%d\t%.3f\t%.1f\t%d\t%.4g\t%.3g\t%.3g\t%.4g\t%.3g\t%s\t%s\t%s\t\n", d.Batch, d.MsPerToken, d.TokPerSec, d.Steps,
			r.FloorMsPerToken, d.XFloor, d.FloorFraction, d.BatchFloorMs, d.BatchFloorFraction,
			orDash("%.2f", d.HFMsPerToken), orDash("%.1f", d.HFTokPerSec), orDash("%.2f", d.SpeedupVsHF))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "prefill (one request, max_tokens 1)\ttokens\tTTFT ms (median)\tfirst run ms\ttok/s\tfloor ms\tfloor/measured\tHF ms\t×HF\t\n")
	for _, p := range r.Prefill {
		fmt.Fprintf(tw, "\t%d\t%.1f\t%.1f\t%.1f\t%.4g\t%.3g\t%s\t%s\t\n", p.Tokens, p.TTFTMs, p.FirstMs, p.TokPerSec, p.FloorMs, p.FloorFraction,
			orDash("%.1f", p.HFMs), orDash("%.2f", p.SpeedupVsHF))
	}
	tw.Flush()
	if t := r.TTFT; t != nil {
		fmt.Fprintf(w, "\nTTFT, %d-token prompt: median %.1f ms over %d runs; floor %.4g ms (floor/measured %.3g); HF %s ms (×HF %s)\n",
			t.PromptTokens, t.MedianMs, len(t.RunsMs), t.FloorMs, t.FloorFraction, orDash("%.1f", t.HFMedianMs), orDash("%.2f", t.SpeedupVsHF))
	}
	printMixed(w, r.Mixed)
}

// weightBytesBF16 is the size of the model's weights (one rank, TP=1) at 2
// bytes per element; a tied embedding counts once.
func weightBytesBF16(ck *model.Checkpoint) (int64, error) {
	decls, err := ck.Arch.Declare(ck.Config, model.Single)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, d := range decls {
		e := int64(1)
		for _, s := range d.Shape {
			e *= int64(s)
		}
		n += 2 * e
	}
	return n, nil
}

// checkpointPreset returns the cohort_preset that modelgen records in
// config.json ("" for other checkpoints).
func checkpointPreset(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return ""
	}
	var c struct {
		Preset string `json:"cohort_preset"`
	}
	_ = json.Unmarshal(data, &c)
	return c.Preset
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median returns the middle value of v (the upper one of an even count),
// 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sorted := slices.Clone(v)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}
