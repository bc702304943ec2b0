package main

import (
	"context"
	"fmt"
	"io"

	"cohort/actors"
	"cohort/model"
	"cohort/model/sample"
	"cohort/model/tokenizer"
)

// engineRun is the engine behind `generate` and `score` with --tp > 1 or
// --devices: the ranks of serve and bench, one request at a time.
type engineRun struct {
	eng *actors.Engine
	ck  *model.Checkpoint
	tok *tokenizer.Tokenizer
}

// openEngine opens p's model (the built-in one when p.dir is empty) and its
// tokenizer, resolves in's prompts and starts an engine of p's ranks for
// them, each followed by up to extra positions.
func openEngine(ctx context.Context, p placementFlags, in promptInput, extra int) (*engineRun, [][]int32, error) {
	dir, err := resolveModelDir(p.dir)
	if err != nil {
		return nil, nil, err
	}
	ck, tok, err := openCheckpoint(dir)
	if err != nil {
		return nil, nil, err
	}
	e := &engineRun{ck: ck, tok: tok}
	prompts, err := in.prompts(tok, ck.Config.VocabSize)
	if err == nil {
		err = e.start(ctx, p, longest(prompts)+extra)
	}
	if err != nil {
		e.Close()
		return nil, nil, err
	}
	return e, prompts, nil
}

// start starts an engine of p's ranks for requests of up to maxLen
// positions. p.threads bounds each CPU rank's workers (0: GOMAXPROCS / tp).
func (e *engineRun) start(ctx context.Context, p placementFlags, maxLen int) error {
	threads := p.threads
	if threads == 0 {
		threads = p.rankThreads()
	}
	newBackend, lockThread, elemBytes, err := backendFactory(p.device, threads)
	if err != nil {
		return err
	}
	const pageSize = 16
	cfg := e.ck.Config
	maxModelLen := (maxLen + pageSize - 1) / pageSize * pageSize
	if cfg.MaxPositions > 0 && maxLen > cfg.MaxPositions {
		return fmt.Errorf("the request needs %d positions; the model has %d", maxLen, cfg.MaxPositions)
	}
	if cfg.MaxPositions > 0 {
		maxModelLen = min(maxModelLen, cfg.MaxPositions)
	}
	// One request: its state, its KV pages and some slack (PlanCapacity
	// gives slots at most half the budget).
	shard := model.Shard{Rank: 0, Size: p.tp}
	size := e.ck.Arch.StateSize(cfg, shard, elemBytes)
	state := size.SlotBytes
	kv := size.TokenBytes * int64(maxModelLen+2*pageSize)
	budget := 2*state + max(state, kv) + 16<<20
	e.eng, err = startOn(ctx, p.device, p.devices, actors.Config{
		Checkpoint: e.ck, Tokenizer: e.tok, TP: p.tp, NewBackend: newBackend, LockThread: lockThread,
		Capacity: model.CapacityInput{Budget: budget, ElemBytes: elemBytes, PageSize: pageSize,
			MaxSeqs: 1, MaxModelLen: maxModelLen},
		MaxPrefillTokens: 2048, MaxRows: 1,
	})
	if err != nil {
		return fmt.Errorf("starting the engine: %w", err)
	}
	return nil
}

// Close stops the engine (if started) and releases the checkpoint.
func (e *engineRun) Close() {
	if e.eng != nil {
		e.eng.Close()
	}
	e.ck.Close()
}

// run submits r and returns its events, the last one final.
func (e *engineRun) run(ctx context.Context, r actors.Request, each func(actors.Event)) ([]actors.Event, error) {
	st, err := e.eng.Submit(r)
	if err != nil {
		return nil, err
	}
	defer st.Cancel()
	var evs []actors.Event
	for {
		ev, err := st.Recv(ctx)
		if err == io.EOF {
			return nil, fmt.Errorf("the engine ended the request without a final event")
		}
		if err != nil {
			return nil, err
		}
		if ev.Err != nil {
			return nil, ev.Err
		}
		if each != nil {
			each(ev)
		}
		evs = append(evs, ev)
		if ev.Finish != "" {
			return evs, nil
		}
	}
}

// generate is loaded.generate through the engine: the same tokens, finish
// ("eos" or "length") and top-1 margins (the logprob gap of the two best
// tokens, which equals their logit gap); emit sees each token's text.
func (e *engineRun) generate(ctx context.Context, ids []int32, maxTokens int, params sample.Params, ignoreEOS bool, emit func(string)) (generated, error) {
	g := generated{PromptTokens: len(ids), Tokens: []int32{}, Margins: []float64{}, Finish: "length"}
	evs, err := e.run(ctx, actors.Request{Prompt: ids, MaxTokens: maxTokens, Params: params, IgnoreEOS: ignoreEOS, TopLogprobs: 2},
		func(ev actors.Event) {
			if emit != nil && ev.Text != "" {
				emit(ev.Text)
			}
		})
	if err != nil {
		return g, err
	}
	for i, ev := range evs {
		if !ev.HasToken {
			continue
		}
		if i == len(evs)-1 && ev.Finish == "stop" {
			g.Finish = "eos" // the EOS token itself is not returned
			break
		}
		g.Tokens = append(g.Tokens, ev.Token)
		margin := 0.0
		if len(ev.Top) > 1 {
			margin = ev.Top[0].Logprob - ev.Top[1].Logprob
		}
		g.Margins = append(g.Margins, margin)
	}
	return g, nil
}

// score is scoreRows + json through the engine: each position's top
// alternatives and the next token's logprob, from the request's prompt
// logprobs and its first generated token's distribution.
func (e *engineRun) score(ctx context.Context, ids []int32, rows []int, top int) ([]scoredPosition, error) {
	evs, err := e.run(ctx, actors.Request{Prompt: ids, MaxTokens: 1, IgnoreEOS: true, Logprobs: true,
		TopLogprobs: top, PromptLogprobs: true}, nil)
	if err != nil {
		return nil, err
	}
	first := evs[0]
	if len(first.PromptLogprobs) != len(ids)-1 {
		return nil, fmt.Errorf("the engine returned %d prompt logprobs for %d tokens", len(first.PromptLogprobs), len(ids))
	}
	out := make([]scoredPosition, 0, len(rows))
	for _, pos := range rows {
		p := scoredPosition{Position: pos, Token: ids[pos]}
		alts := first.Top
		if pos < len(ids)-1 {
			r := first.PromptLogprobs[pos] // the distribution after ids[pos], scoring ids[pos+1]
			p.Next = &scoredToken{ID: r.Token.ID, Logprob: r.Token.Logprob}
			alts = r.Top
		}
		p.Top = make([]scoredToken, len(alts))
		for i, a := range alts {
			p.Top[i] = scoredToken{ID: a.ID, Logprob: a.Logprob}
		}
		out = append(out, p)
	}
	return out, nil
}
