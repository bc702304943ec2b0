package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"cohort/model"
	"cohort/model/sample"
)

// scoredPosition is one position of `cohort score` output: the logprob of
// the next given token (if any) and the top-k alternatives.
type scoredPosition struct {
	Position int           `json:"position"`
	Token    int32         `json:"token"`
	Next     *scoredToken  `json:"next,omitempty"`
	Top      []scoredToken `json:"top"`
}

type scoredToken struct {
	ID      int32   `json:"id"`
	Logprob float64 `json:"logprob"`
}

func runScore(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("score", flag.ContinueOnError)
	dir := fs.String("model", "", "model directory (default: the built-in tiny model)")
	tokens := fs.String("tokens", "", "comma-separated token ids")
	prompt := fs.String("prompt", "", "text to tokenize and score (instead of --tokens)")
	top := fs.Int("top", 8, "alternatives per position")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*tokens == "") == (*prompt == "") {
		return fmt.Errorf("score: give exactly one of --tokens and --prompt")
	}
	l, err := loadModel(*dir)
	if err != nil {
		return err
	}
	defer l.ck.Close()
	ids, err := scoreInput(l, *tokens, *prompt)
	if err != nil {
		return err
	}
	s := model.NewSession(l.be, l.m, len(ids))
	logits, err := s.Step(ids, true)
	if err != nil {
		return err
	}
	vocab := len(logits) / len(ids)
	out := make([]scoredPosition, len(ids))
	for i := range ids {
		lp := sample.LogSoftmax(logits[i*vocab : (i+1)*vocab])
		out[i] = scoredPosition{Position: i, Token: ids[i]}
		for _, t := range sample.Top(lp, *top) {
			out[i].Top = append(out[i].Top, scoredToken(t))
		}
		if i+1 < len(ids) {
			out[i].Next = &scoredToken{ID: ids[i+1], Logprob: lp[ids[i+1]]}
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func scoreInput(l *loaded, tokens, prompt string) ([]int32, error) {
	if prompt != "" {
		if err := l.needTokenizer(); err != nil {
			return nil, err
		}
		ids := l.tok.Encode(prompt)
		if len(ids) == 0 {
			return nil, fmt.Errorf("score: the prompt encodes to no tokens")
		}
		return ids, nil
	}
	var ids []int32
	for _, f := range strings.Split(tokens, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("score: --tokens: %q is not a token id", f)
		}
		if v < 0 || int(v) >= l.ck.Config.VocabSize {
			return nil, fmt.Errorf("score: --tokens: id %d is outside the vocabulary [0, %d)", v, l.ck.Config.VocabSize)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}
