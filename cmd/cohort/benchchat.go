package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"cohort/actors"
	"cohort/internal/testmodels/modelgen"
	"cohort/model"
	"cohort/model/sample"
	"cohort/model/tokenizer"
)

// The multi-turn chat benchmark of the prefix cache (issue 17, `cohort
// bench --chat`): Conversations concurrent conversations share one
// System-token system prompt; each then runs Turns turns, a TurnTokens-token
// user message and a ReplyTokens-token reply (EOS ignored), every turn's
// prompt repeating the whole conversation so far, as a chat client sends
// it. The same workload runs on two engines, without and with the prefix
// cache, and the report puts each turn's TTFT and the share of prompt
// tokens served from the cache side by side. With greedy sampling the
// replies must be the same in both runs; the report counts those that are.

// chatConfig is the workload's shape.
type chatConfig struct {
	System        int `json:"system_tokens"`
	Turns         int `json:"turns"`
	TurnTokens    int `json:"turn_tokens"`
	ReplyTokens   int `json:"reply_tokens"`
	Conversations int `json:"conversations"`
	// Temperature, when positive, makes every other conversation sample
	// seeded (seed = its index) instead of greedy.
	Temperature float64 `json:"temperature,omitempty"`
}

// chatTurn is one turn index over every conversation.
type chatTurn struct {
	Turn         int     `json:"turn"`
	PromptTokens float64 `json:"prompt_tokens"` // mean
	TTFTP50Ms    float64 `json:"ttft_p50_ms"`
	TTFTMeanMs   float64 `json:"ttft_mean_ms"`
	CachedShare  float64 `json:"cached_share"` // prompt tokens served from the cache / prompt tokens
}

// chatRun is one engine's run of the workload.
type chatRun struct {
	PrefixCache bool       `json:"prefix_cache"`
	Control     bool       `json:"control,omitempty"` // the second run without the cache (--chat-control)
	Turns       []chatTurn `json:"turns"`
	// HitRate is the share of all prompt tokens served from the cache,
	// HitRateAfterFirst that of turns 2 and later (the aim: ≥ 0.9).
	HitRate           float64 `json:"hit_rate"`
	HitRateAfterFirst float64 `json:"hit_rate_after_first"`
	TTFTP50Ms         float64 `json:"ttft_p50_ms"`
	TTFTAfterFirstMs  float64 `json:"ttft_p50_after_first_ms"`
	WallSeconds       float64 `json:"wall_s"`
	Slots             int     `json:"slots"`
	KVPages           int     `json:"kv_pages"`
	Snapshots         int     `json:"snapshots"`
	EngineHits        uint64  `json:"engine_prefix_hits"`
	EngineQueries     uint64  `json:"engine_prefix_queries"`

	replies [][][]int32 // by conversation and turn
}

// chatReport is what `cohort bench --chat --json` writes.
type chatReport struct {
	What            string     `json:"what"`
	Date            string     `json:"date"`
	Model           string     `json:"model"`
	Preset          string     `json:"preset,omitempty"`
	Device          string     `json:"device"`
	TP              int        `json:"tp"`
	GOMAXPROCS      int        `json:"gomaxprocs"`
	Config          chatConfig `json:"config"`
	BudgetMiB       int64      `json:"kv_budget_mib"`
	SnapshotsMiB    int64      `json:"snapshots_mib"`
	Runs            []chatRun  `json:"runs"` // without the cache, then with it
	SameReplies     int        `json:"same_replies"`
	ComparedReplies int        `json:"compared_replies"`
	// FirstTurnPrefix is, for each conversation, how many leading tokens
	// of its first reply the two runs share: the first turn's prompts are
	// the same in both runs (later turns repeat replies that may differ),
	// so a short shared prefix there points at a difference in the
	// engines' numerics, not at a workload that drifted.
	FirstTurnPrefix []int `json:"first_turn_prefix"`
	// Control (--chat-control) compares a second run without the cache
	// with the first: what the engine's own run-to-run differences are
	// (other arrival orders batch the work otherwise), the yardstick for
	// the comparison with the cache.
	Control *chatAgreement `json:"control,omitempty"`
}

// chatAgreement is how far two runs' replies agree.
type chatAgreement struct {
	SameReplies     int   `json:"same_replies"`
	ComparedReplies int   `json:"compared_replies"`
	FirstTurnPrefix []int `json:"first_turn_prefix"`
}

// chatMode reports whether bench's arguments ask for the chat benchmark.
func chatMode(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "chat" {
			on, err := strconv.ParseBool(value)
			return !hasValue || err == nil && on
		}
	}
	return false
}

// chatFlags are the chat benchmark's flags.
type chatFlags struct {
	run                     *placementFlags
	cfg                     chatConfig
	preset, jsonOut         string
	maxPrefill, budgetMiB   int
	snapshotsMiB            int
	stepDeadline            time.Duration
	skipNoCache, chatSwitch bool
	control                 bool
}

func parseChatFlags(args []string, stdout io.Writer) (*chatFlags, error) {
	fs, run := newPlacementFlagSet("bench", "tensor-parallel degree (ranks)")
	f := &chatFlags{run: run}
	fs.BoolVar(&f.chatSwitch, "chat", false, "run the multi-turn chat benchmark of the prefix cache instead of the decode/prefill runs")
	fs.StringVar(&f.preset, "preset", "", "generate this preset into a temporary directory: "+strings.Join(modelgen.PresetNames(), ", "))
	fs.IntVar(&f.cfg.System, "chat-system", 2048, "tokens of the system prompt all conversations share")
	fs.IntVar(&f.cfg.Turns, "chat-turns", 8, "turns of each conversation")
	fs.IntVar(&f.cfg.TurnTokens, "chat-turn-tokens", 100, "tokens of each user message")
	fs.IntVar(&f.cfg.ReplyTokens, "chat-reply-tokens", 100, "tokens of each reply (EOS ignored)")
	fs.IntVar(&f.cfg.Conversations, "chat-conversations", 32, "concurrent conversations")
	fs.Float64Var(&f.cfg.Temperature, "chat-temperature", 0, "sample every other conversation at this temperature, seeded (0: all greedy)")
	fs.IntVar(&f.maxPrefill, "max-prefill-tokens", 0, maxPrefillUsage)
	fs.IntVar(&f.budgetMiB, "kv-budget-mib", 0, "memory per rank for KV pages, request state and snapshots, in MiB (0: enough for the workload)")
	fs.IntVar(&f.snapshotsMiB, "prefix-cache-snapshots-mib", 0, "memory per rank for the cache's state snapshots, in MiB (0: six a conversation)")
	fs.DurationVar(&f.stepDeadline, "step-deadline", time.Minute, "a step's replies must all arrive within this")
	fs.BoolVar(&f.skipNoCache, "chat-cache-only", false, "run only the engine with the cache (no side-by-side baseline)")
	fs.BoolVar(&f.control, "chat-control", false, "also run the workload a second time without the cache and compare the two uncached runs' replies (the engine's own run-to-run agreement)")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	if err := parseFlags(fs, args, stdout); err != nil {
		return nil, err
	}
	f.maxPrefill = run.maxPrefill(f.maxPrefill)
	c := f.cfg
	switch {
	case (run.dir == "") == (f.preset == ""):
		return nil, errors.New("bench --chat: give exactly one of --model and --preset")
	case run.tp < 1 || f.maxPrefill < 1 || f.budgetMiB < 0 || f.snapshotsMiB < 0:
		return nil, errors.New("bench --chat: --tp and --max-prefill-tokens must be positive, the MiB flags not negative")
	case c.System < 1 || c.Turns < 1 || c.TurnTokens < 2 || c.ReplyTokens < 1 || c.Conversations < 1 || c.Temperature < 0:
		return nil, errors.New("bench --chat: the --chat-* sizes must be positive (--chat-turn-tokens at least 2), --chat-temperature not negative")
	}
	return f, nil
}

// runBenchChat is `cohort bench --chat`.
func runBenchChat(ctx context.Context, args []string, stdout io.Writer) error {
	f, err := parseChatFlags(args, stdout)
	if err != nil {
		return err
	}
	dir, cleanup, err := chatModelDir(f, stdout)
	if err != nil {
		return err
	}
	defer cleanup()
	ck, tok, err := openCheckpoint(dir)
	if err != nil {
		return fmt.Errorf("bench --chat: %w", err)
	}
	defer ck.Close()
	b, err := newChatBench(f, ck, tok)
	if err != nil {
		return err
	}
	rep := &chatReport{What: "multi-turn chat through the engine, without and with the prefix cache; TTFT from submit to the first token's event",
		Date: time.Now().UTC().Format(time.RFC3339), Model: dir, Preset: f.preset, Device: f.run.device, TP: f.run.tp,
		GOMAXPROCS: runtime.GOMAXPROCS(0), Config: f.cfg, BudgetMiB: b.budget >> 20, SnapshotsMiB: b.snapshots >> 20}
	if rep.Preset == "" {
		rep.Preset = checkpointPreset(dir)
	}
	modes := []bool{false, true}
	switch {
	case f.skipNoCache:
		modes = modes[1:]
	case f.control:
		modes = append(modes, false)
	}
	for i, cache := range modes {
		fmt.Fprintf(stdout, "chat benchmark, prefix cache %v: %d conversations × %d turns\n", cache, f.cfg.Conversations, f.cfg.Turns)
		run, err := b.run(ctx, cache)
		if err != nil {
			return fmt.Errorf("bench --chat (prefix cache %v): %w", cache, err)
		}
		run.Control = i == 2
		rep.Runs = append(rep.Runs, run)
	}
	if len(rep.Runs) >= 2 {
		a := agreement(rep.Runs[0], rep.Runs[1])
		rep.SameReplies, rep.ComparedReplies, rep.FirstTurnPrefix = a.SameReplies, a.ComparedReplies, a.FirstTurnPrefix
	}
	if len(rep.Runs) == 3 {
		a := agreement(rep.Runs[0], rep.Runs[2])
		rep.Control = &a
	}
	printChat(stdout, rep)
	return writeChatJSON(f.jsonOut, rep)
}

// chatModelDir is the checkpoint to run: --model, or --preset generated
// into a temporary directory that cleanup removes.
func chatModelDir(f *chatFlags, stdout io.Writer) (string, func(), error) {
	if f.preset == "" {
		return f.run.dir, func() {}, nil
	}
	p, ok := modelgen.Presets[f.preset]
	if !ok {
		return "", nil, fmt.Errorf("bench --chat: unknown preset %q (have %s)", f.preset, strings.Join(modelgen.PresetNames(), ", "))
	}
	tmp, err := os.MkdirTemp("", "cohort-bench-chat-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	fmt.Fprintf(stdout, "generating the %s preset into %s\n", p.Name, tmp)
	if err := modelgen.Write(tmp, p); err != nil {
		cleanup()
		return "", nil, err
	}
	return tmp, cleanup, nil
}

func writeChatJSON(path string, rep *chatReport) error {
	if path == "" {
		return nil
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// chatBench holds what both runs share: the engine's configuration and the
// workload's tokens.
type chatBench struct {
	f                 *chatFlags
	ck                *model.Checkpoint
	tok               *tokenizer.Tokenizer
	newBackend        actors.BackendFactory
	lockThread        bool
	elemBytes         int
	budget, snapshots int64
	maxModelLen       int
	system            []int32
	users             [][][]int32 // by conversation and turn
	open, end         []int32     // a message's first and last tokens (the template's, where the tokenizer has them)
}

const chatPageSize = 16

func newChatBench(f *chatFlags, ck *model.Checkpoint, tok *tokenizer.Tokenizer) (*chatBench, error) {
	b := &chatBench{f: f, ck: ck, tok: tok}
	var err error
	if b.newBackend, b.lockThread, b.elemBytes, err = backendFactory(f.run.device, f.run.rankThreads()); err != nil {
		return nil, fmt.Errorf("bench --chat: %w", err)
	}
	b.tokens(rand.New(rand.NewPCG(17, 0xc4a7)))
	longest := len(b.system) + f.cfg.Turns*(f.cfg.TurnTokens+f.cfg.ReplyTokens+2)
	b.maxModelLen = (longest + 2*chatPageSize) / chatPageSize * chatPageSize
	if mp := ck.Config.MaxPositions; mp > 0 && b.maxModelLen > mp {
		return nil, fmt.Errorf("bench --chat: conversations reach %d positions; the model has %d", b.maxModelLen, mp)
	}
	b.size()
	return b, nil
}

// tokens draws the system prompt and every user message. Each message
// opens with <|im_start|> and closes with <|im_end|> when the tokenizer has
// them, as the chat template writes it.
func (b *chatBench) tokens(r *rand.Rand) {
	if id, ok := b.tok.TokenID("<|im_start|>"); ok {
		b.open = []int32{id}
	}
	if id, ok := b.tok.TokenID("<|im_end|>"); ok {
		b.end = []int32{id}
	}
	vocab := min(b.ck.Config.VocabSize, b.tok.VocabSize(), 4096)
	draw := func(n int) []int32 {
		out := slices.Clone(b.open)
		for len(out) < n-len(b.end) {
			out = append(out, int32(r.IntN(vocab)))
		}
		return append(out, b.end...)
	}
	c := b.f.cfg
	b.system = draw(c.System)
	b.users = make([][][]int32, c.Conversations)
	for i := range b.users {
		for range c.Turns {
			b.users[i] = append(b.users[i], draw(c.TurnTokens))
		}
	}
}

// size sets the memory per rank: every conversation's longest sequence in
// KV pages, its slot, and snapshot places (six a conversation unless
// --prefix-cache-snapshots-mib says), unless --kv-budget-mib says.
func (b *chatBench) size() {
	c := b.f.cfg
	st := b.ck.Arch.StateSize(b.ck.Config, model.Shard{Rank: 0, Size: b.f.run.tp}, b.elemBytes)
	b.snapshots = int64(b.f.snapshotsMiB) << 20
	if b.snapshots == 0 {
		b.snapshots = 6 * int64(c.Conversations) * st.SlotBytes
	}
	b.budget = int64(b.f.budgetMiB) << 20
	if b.budget == 0 {
		kv := st.TokenBytes * int64(c.Conversations) * int64(b.maxModelLen+2*chatPageSize)
		slots := int64(c.Conversations) * st.SlotBytes
		b.budget = b.snapshots + max(2*slots, slots+kv) + 64<<20
	}
}

// engine starts an engine for one run.
func (b *chatBench) engine(ctx context.Context, cache bool) (*actors.Engine, error) {
	n := b.f.cfg.Conversations
	cfg := actors.Config{Checkpoint: b.ck, Tokenizer: b.tok, TP: b.f.run.tp, NewBackend: b.newBackend, LockThread: b.lockThread,
		Capacity: model.CapacityInput{Budget: b.budget, ElemBytes: b.elemBytes, PageSize: chatPageSize, MaxSeqs: max(n, 1),
			MaxModelLen: b.maxModelLen, Snapshots: b.snapshots},
		MaxPrefillTokens: b.f.maxPrefill, MaxRows: max(64, n), StepDeadline: b.f.stepDeadline, DisablePrefixCache: !cache}
	return startOn(ctx, b.f.run.device, b.f.run.devices, cfg)
}

// chatSample is one turn of one conversation.
type chatSample struct {
	prompt, cached int
	ttft           time.Duration
}

// run runs the workload on a fresh engine.
func (b *chatBench) run(ctx context.Context, cache bool) (chatRun, error) {
	eng, err := b.engine(ctx, cache)
	if err != nil {
		return chatRun{}, err
	}
	defer eng.Close()
	info := eng.Info()
	out := chatRun{PrefixCache: cache, Slots: info.Slots, KVPages: info.KVPages, Snapshots: info.Snapshots}
	if _, _, err := chatTurnOnce(ctx, eng, actors.Request{Prompt: b.users[0][0], MaxTokens: 2, IgnoreEOS: true}); err != nil {
		return out, fmt.Errorf("warm-up: %w", err)
	}
	if err := eng.ResetPrefixCache(ctx); err != nil {
		return out, err
	}
	c := b.f.cfg
	samples := make([][]chatSample, c.Conversations)
	out.replies = make([][][]int32, c.Conversations)
	errs := make([]error, c.Conversations)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range c.Conversations {
		wg.Go(func() { samples[i], out.replies[i], errs[i] = b.converse(ctx, eng, i) })
	}
	wg.Wait()
	out.WallSeconds = time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	if st, err := eng.Stats(ctx); err == nil {
		out.EngineHits, out.EngineQueries = st.PrefixHits, st.PrefixQueries
	}
	out.summarize(samples)
	return out, nil
}

// converse runs conversation i's turns one after the other.
func (b *chatBench) converse(ctx context.Context, eng *actors.Engine, i int) ([]chatSample, [][]int32, error) {
	history := slices.Clone(b.system)
	boundaries := []int{len(history)}
	var samples []chatSample
	var replies [][]int32
	for turn, user := range b.users[i] {
		prompt := slices.Concat(history, user, b.open)
		req := actors.Request{Prompt: prompt, MaxTokens: b.f.cfg.ReplyTokens, IgnoreEOS: true, Boundaries: slices.Clone(boundaries)}
		if t := b.f.cfg.Temperature; t > 0 && i%2 == 1 {
			req.Params = sample.Params{Temperature: t, Seed: uint64(i)}
		}
		submit := time.Now()
		reply, ev, err := chatTurnOnce(ctx, eng, req)
		if err != nil {
			return nil, nil, fmt.Errorf("conversation %d, turn %d: %w", i, turn+1, err)
		}
		samples = append(samples, chatSample{prompt: len(prompt), cached: ev.last.Usage.CachedTokens, ttft: ev.first.Sub(submit)})
		replies = append(replies, reply)
		history = slices.Concat(prompt, reply, b.end)
		boundaries = append(boundaries, len(history))
	}
	return samples, replies, nil
}

// turnEvents are the times and usage a turn's stream reported.
type turnEvents struct {
	first time.Time
	last  actors.Event
}

// chatTurnOnce submits one request and reads its stream to the end.
func chatTurnOnce(ctx context.Context, eng *actors.Engine, req actors.Request) ([]int32, turnEvents, error) {
	var ev turnEvents
	s, err := eng.Submit(req)
	if err != nil {
		return nil, ev, err
	}
	var ids []int32
	for {
		e, err := s.Recv(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			s.Cancel()
			return nil, ev, err
		}
		if e.HasToken {
			if len(ids) == 0 {
				ev.first = e.Time
			}
			ids = append(ids, e.Token)
		}
		ev.last = e
	}
	if ev.last.Finish != "length" {
		return nil, ev, fmt.Errorf("the request ended with %q: %v", ev.last.Finish, ev.last.Err)
	}
	return ids, ev, nil
}

// summarize fills the per-turn rows and the totals.
func (r *chatRun) summarize(samples [][]chatSample) {
	var all, later []chatSample
	for turn := range samples[0] {
		var col []chatSample
		for _, conv := range samples {
			col = append(col, conv[turn])
		}
		all = append(all, col...)
		if turn > 0 {
			later = append(later, col...)
		}
		p50, mean, share := chatStats(col)
		prompt := 0.0
		for _, s := range col {
			prompt += float64(s.prompt) / float64(len(col))
		}
		r.Turns = append(r.Turns, chatTurn{Turn: turn + 1, PromptTokens: prompt, TTFTP50Ms: p50, TTFTMeanMs: mean, CachedShare: share})
	}
	r.TTFTP50Ms, _, r.HitRate = chatStats(all)
	r.TTFTAfterFirstMs, _, r.HitRateAfterFirst = chatStats(later)
}

// chatStats is a set of turns' TTFT median and mean and their cached share
// of prompt tokens.
func chatStats(s []chatSample) (p50, mean, share float64) {
	if len(s) == 0 {
		return 0, 0, 0
	}
	var ttfts []float64
	prompt, cached := 0, 0
	for _, x := range s {
		ttfts = append(ttfts, ms(x.ttft))
		mean += ms(x.ttft) / float64(len(s))
		prompt, cached = prompt+x.prompt, cached+x.cached
	}
	slices.Sort(ttfts)
	return ttfts[len(ttfts)/2], mean, float64(cached) / float64(prompt)
}

// agreement counts the replies two runs agree on and, per conversation,
// the length of the common prefix of their first replies.
func agreement(x, y chatRun) chatAgreement {
	var a chatAgreement
	for i, conv := range x.replies {
		for t, reply := range conv {
			a.ComparedReplies++
			if slices.Equal(reply, y.replies[i][t]) {
				a.SameReplies++
			}
		}
		if len(conv) > 0 && len(y.replies[i]) > 0 {
			p, q := conv[0], y.replies[i][0]
			n := 0
			for n < len(p) && n < len(q) && p[n] == q[n] {
				n++
			}
			a.FirstTurnPrefix = append(a.FirstTurnPrefix, n)
		}
	}
	return a
}

func printChat(w io.Writer, r *chatReport) {
	c := r.Config
	fmt.Fprintf(w, "\ncohort bench --chat: %s, device %s, tp %d; %d conversations, a %d-token system prompt, %d turns of %d tokens + %d-token replies\n",
		r.Model, r.Device, r.TP, c.Conversations, c.System, c.Turns, c.TurnTokens, c.ReplyTokens)
	fmt.Fprintf(w, "budget %d MiB per rank, %d MiB of it for snapshots\n\n", r.BudgetMiB, r.SnapshotsMiB)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "turn\tprompt tokens")
	for _, run := range r.Runs {
		fmt.Fprintf(tw, "\tTTFT p50 ms (%s)\tTTFT mean ms (%s)\tcached (%s)", cacheLabel(run), cacheLabel(run), cacheLabel(run))
	}
	fmt.Fprintln(tw, "\t")
	for t := range r.Runs[0].Turns {
		fmt.Fprintf(tw, "%d\t%.0f", t+1, r.Runs[0].Turns[t].PromptTokens)
		for _, run := range r.Runs {
			tr := run.Turns[t]
			fmt.Fprintf(tw, "\t%.1f\t%.1f\t%.1f %%", tr.TTFTP50Ms, tr.TTFTMeanMs, 100*tr.CachedShare)
		}
		fmt.Fprintln(tw, "\t")
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, run := range r.Runs {
		fmt.Fprintf(w, "%s: hit rate %.1f %% of prompt tokens (%.1f %% after the first turn); TTFT p50 %.1f ms (%.1f ms after the first turn); %.1f s; slots %d, pages %d, snapshots %d\n",
			cacheLabel(run), 100*run.HitRate, 100*run.HitRateAfterFirst, run.TTFTP50Ms, run.TTFTAfterFirstMs, run.WallSeconds,
			run.Slots, run.KVPages, run.Snapshots)
	}
	if r.ComparedReplies > 0 {
		fmt.Fprintf(w, "replies identical with and without the cache: %d of %d\n", r.SameReplies, r.ComparedReplies)
		printFirstReplies(w, r.FirstTurnPrefix, r.Config.ReplyTokens)
	}
	if c := r.Control; c != nil {
		fmt.Fprintf(w, "control, two runs without the cache: replies identical %d of %d\n", c.SameReplies, c.ComparedReplies)
		printFirstReplies(w, c.FirstTurnPrefix, r.Config.ReplyTokens)
	}
}

// printFirstReplies summarizes how far the first replies of two runs agree
// (their prompts are the same in both).
func printFirstReplies(w io.Writer, prefix []int, replyTokens int) {
	if len(prefix) == 0 {
		return
	}
	p := slices.Sorted(slices.Values(prefix))
	first := len(p) - sort.SearchInts(p, 1)
	fmt.Fprintf(w, "first replies (the same prompts in both runs): first token equal in %d of %d, common prefix median %d of %d tokens (min %d)\n",
		first, len(p), p[len(p)/2], replyTokens, p[0])
}

func cacheLabel(r chatRun) string {
	if r.Control {
		return "no cache, again"
	}
	if r.PrefixCache {
		return "cache"
	}
	return "no cache"
}
