package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"cohort/model"
	"cohort/model/sample"
)

// generated is one prompt's continuation in `cohort generate --json` output.
type generated struct {
	PromptTokens int       `json:"prompt_tokens"`
	Tokens       []int32   `json:"tokens"`
	Margins      []float64 `json:"top1_margins"` // logit gap between the best and second-best token at each step
	Finish       string    `json:"finish"`       // "length" or "eos"
	Text         string    `json:"text,omitempty"`
}

func runGenerate(ctx context.Context, args []string, stdout io.Writer) error {
	fs, run, input := newPromptFlagSet("generate",
		"tensor-parallel degree (ranks); above 1, or with --devices, generation runs through the engine as in serve", "Hello", "prompt text")
	var o generateOptions
	fs.IntVar(&o.maxTokens, "max-tokens", 32, "tokens to generate")
	temp := fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
	topK := fs.Int("top-k", 0, "top-k (0 = off)")
	topP := fs.Float64("top-p", 1, "top-p (1 = off)")
	seed := fs.Uint64("seed", 0, "sampling seed")
	fs.IntVar(&o.chunk, "prefill-chunk", 512, "prefill chunk size in tokens")
	fs.BoolVar(&o.ignoreEOS, "ignore-eos", false, "keep generating past the model's EOS tokens")
	fs.BoolVar(&o.asJSON, "json", false, "print the generated token ids (and text) as JSON (--tokens and --ids-file imply it)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	o.params = sample.Params{Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed}
	if err := o.params.Validate(); err != nil {
		return err
	}
	switch {
	case o.maxTokens < 1 || o.chunk < 1:
		return fmt.Errorf("generate: --max-tokens and --prefill-chunk must be positive")
	case input.tokens != "" && input.idsFile != "":
		return errors.New("generate: give at most one of --tokens and --ids-file")
	}
	err := runPrompts(*run, *input,
		func(in promptInput) error { return generateOnEngine(ctx, stdout, *run, in, o) },
		func(in promptInput) error { return generateOnRank(ctx, stdout, *run, in, o) })
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	return nil
}

// generateOnRank is `generate` at --tp 1 without --devices: each prompt on
// one rank in a device thread (onModel), printing the generated text
// as it comes, or JSON.
func generateOnRank(ctx context.Context, stdout io.Writer, run placementFlags, in promptInput, o generateOptions) error {
	return onModel(run, in, func(l *loaded, prompts [][]int32) error {
		if in.ids != nil {
			var all []generated
			for _, ids := range prompts {
				g, err := l.generate(ctx, ids, o.maxTokens, o.chunk, o.params, o.ignoreEOS, nil)
				if err != nil {
					return err
				}
				all = append(all, g)
			}
			return encodeResults(json.NewEncoder(stdout), all, in.nested)
		}
		dec := l.tok.NewStreamDecoder()
		var text strings.Builder
		emit := func(id int32) {
			s := dec.Add(id)
			if o.asJSON {
				text.WriteString(s)
			} else {
				fmt.Fprint(stdout, s)
			}
		}
		g, err := l.generate(ctx, prompts[0], o.maxTokens, o.chunk, o.params, o.ignoreEOS, emit)
		if err != nil {
			return err
		}
		if !o.asJSON {
			fmt.Fprintln(stdout, dec.Flush())
			return nil
		}
		text.WriteString(dec.Flush())
		g.Text = text.String()
		return json.NewEncoder(stdout).Encode(g)
	})
}

// generate prefills ids in chunks and samples up to maxTokens tokens, one
// session step each; emit (if not nil) sees each token as it is chosen. It
// stops at an EOS token unless ignoreEOS (the EOS token is not returned).
func (l *loaded) generate(ctx context.Context, ids []int32, maxTokens, chunk int, params sample.Params, ignoreEOS bool, emit func(int32)) (generated, error) {
	g := generated{PromptTokens: len(ids), Tokens: []int32{}, Margins: []float64{}, Finish: "length"}
	s := model.NewSession(l.be, l.m, len(ids)+maxTokens)
	logits, err := prefill(l, s, ids, chunk)
	if err != nil {
		return g, err
	}
	for step := 0; step < maxTokens; step++ {
		if err := ctx.Err(); err != nil {
			return g, err
		}
		id := sample.Pick(logits, params, step, 0).Token.ID
		if !ignoreEOS && slices.Contains(l.ck.Config.EOS, id) {
			g.Finish = "eos"
			break
		}
		g.Tokens = append(g.Tokens, id)
		g.Margins = append(g.Margins, top1Margin(logits))
		if emit != nil {
			emit(id)
		}
		if step+1 == maxTokens {
			break
		}
		logits, err = s.Step([]int32{id}, false)
		l.resetScratch()
		if err != nil {
			return g, err
		}
	}
	return g, nil
}

// top1Margin is the gap between the largest and second-largest logit.
func top1Margin(logits []float32) float64 {
	if len(logits) < 2 {
		return 0
	}
	a, b := logits[0], logits[1]
	if b > a {
		a, b = b, a
	}
	for _, v := range logits[2:] {
		if v > a {
			a, b = v, a
		} else if v > b {
			b = v
		}
	}
	return float64(a) - float64(b)
}

// prefill feeds the prompt in chunks and returns the last position's logits.
func prefill(l *loaded, s *model.Session, ids []int32, chunk int) ([]float32, error) {
	var logits []float32
	for start := 0; start < len(ids); start += chunk {
		end := min(start+chunk, len(ids))
		rows := []int{} // only the last chunk's last row needs logits
		if end == len(ids) {
			rows = []int{end - start - 1}
		}
		var err error
		logits, err = s.StepRows(ids[start:end], rows)
		l.resetScratch()
		if err != nil {
			return nil, err
		}
	}
	return logits, nil
}

// generateOptions are what generate does with each prompt.
type generateOptions struct {
	maxTokens, chunk  int // chunk: prefill tokens per step on one rank
	params            sample.Params
	ignoreEOS, asJSON bool
}

// generateOnEngine is `generate` with --tp > 1 or --devices: each prompt
// through the engine (the ranks of serve), printing what --tp 1 prints (the
// generated text, or JSON).
func generateOnEngine(ctx context.Context, stdout io.Writer, run placementFlags, in promptInput, o generateOptions) error {
	e, prompts, err := openEngine(ctx, run, in, o.maxTokens)
	if err != nil {
		return err
	}
	defer e.Close()
	text := in.ids == nil
	if text && !o.asJSON {
		if _, err := e.generate(ctx, prompts[0], o.maxTokens, o.params, o.ignoreEOS, func(s string) { fmt.Fprint(stdout, s) }); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		return nil
	}
	var all []generated
	for _, ids := range prompts {
		var out strings.Builder
		g, err := e.generate(ctx, ids, o.maxTokens, o.params, o.ignoreEOS, func(s string) { out.WriteString(s) })
		if err != nil {
			return err
		}
		if text {
			g.Text = out.String()
		}
		all = append(all, g)
	}
	return encodeResults(json.NewEncoder(stdout), all, in.nested)
}
