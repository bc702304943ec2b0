package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"

	"cohort/model"
	"cohort/model/sample"
)

func runGenerate(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	dir := fs.String("model", "", "model directory (default: the built-in tiny model)")
	prompt := fs.String("prompt", "Hello", "prompt text")
	maxTokens := fs.Int("max-tokens", 32, "tokens to generate")
	temp := fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
	topK := fs.Int("top-k", 0, "top-k (0 = off)")
	topP := fs.Float64("top-p", 1, "top-p (1 = off)")
	seed := fs.Uint64("seed", 0, "sampling seed")
	chunk := fs.Int("prefill-chunk", 512, "prefill chunk size in tokens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	params := sample.Params{Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed}
	if err := params.Validate(); err != nil {
		return err
	}
	if *maxTokens < 1 || *chunk < 1 {
		return fmt.Errorf("generate: --max-tokens and --prefill-chunk must be positive")
	}
	l, err := loadModel(*dir)
	if err != nil {
		return err
	}
	defer l.ck.Close()
	if err := l.needTokenizer(); err != nil {
		return err
	}
	ids := l.tok.Encode(*prompt)
	if len(ids) == 0 {
		return fmt.Errorf("generate: the prompt encodes to no tokens")
	}
	s := model.NewSession(l.be, l.m, len(ids)+*maxTokens)
	logits, err := prefill(s, ids, *chunk)
	if err != nil {
		return err
	}
	dec := l.tok.NewStreamDecoder()
	for step := 0; step < *maxTokens; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		id := sample.Pick(logits, params, step, 0).Token.ID
		if slices.Contains(l.ck.Config.EOS, id) {
			break
		}
		fmt.Fprint(stdout, dec.Add(id))
		if step+1 == *maxTokens {
			break
		}
		if logits, err = s.Step([]int32{id}, false); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, dec.Flush())
	return nil
}

// prefill feeds the prompt in chunks and returns the last position's logits.
func prefill(s *model.Session, ids []int32, chunk int) ([]float32, error) {
	var logits []float32
	for start := 0; start < len(ids); start += chunk {
		end := min(start+chunk, len(ids))
		var err error
		if logits, err = s.Step(ids[start:end], false); err != nil {
			return nil, err
		}
	}
	return logits, nil
}
