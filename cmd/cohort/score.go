package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"cohort/model"
	"cohort/model/safetensors"
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

func runScore(ctx context.Context, args []string, stdout io.Writer) error {
	fs, run, input := newPromptFlagSet("score",
		"tensor-parallel degree (ranks); above 1, or with --devices, the prompt runs through the engine as in serve (--top at most 20, no --out)",
		"", "text to tokenize and score (instead of --tokens)")
	var o scoreOptions
	fs.IntVar(&o.top, "top", 8, "alternatives per position (JSON output)")
	fs.StringVar(&o.positions, "positions", "all", `positions to output: "all", "last", "stride:N" (0, N, 2N, ... and the last) or a comma-separated list`)
	fs.StringVar(&o.out, "out", "", "write the full log-softmax rows of the chosen positions to this .safetensors file instead of JSON")
	fs.IntVar(&o.chunk, "chunk", 2048, "prefill chunk in tokens (0: the whole prompt in one step; at --tp 1 without --devices)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := o.check(*run, *input); err != nil {
		return fmt.Errorf("score: %w", err)
	}
	var err error
	if o.spec, err = parsePositionSpec(o.positions); err != nil {
		return fmt.Errorf("score: --positions: %w", err)
	}
	err = runPrompts(*run, *input,
		func(in promptInput) error { return scoreOnEngine(ctx, stdout, *run, in, o) },
		func(in promptInput) error { return scoreOnRank(ctx, stdout, *run, in, o) })
	if err != nil {
		return fmt.Errorf("score: %w", err)
	}
	return nil
}

// scoreOptions are what score outputs for each prompt.
type scoreOptions struct {
	top       int    // alternatives per position
	positions string // --positions as given
	spec      positionSpec
	out       string // a .safetensors file for the full rows, or "" for JSON
	chunk     int    // prefill tokens per step on one rank (0: the prompt)
}

// check rejects score's flags that do not go together.
func (o scoreOptions) check(run placementFlags, input inputFlags) error {
	inputs := 0
	for _, s := range []string{input.tokens, input.prompt, input.idsFile} {
		if s != "" {
			inputs++
		}
	}
	switch {
	case inputs != 1:
		return errors.New("give exactly one of --tokens, --prompt and --ids-file")
	case o.top < 0:
		return errors.New("--top must not be negative")
	case o.chunk < 0:
		return errors.New("--chunk must not be negative")
	case o.out != "" && !strings.HasSuffix(o.out, ".safetensors"):
		return fmt.Errorf("--out %q: want a .safetensors file name", o.out)
	case run.engine() && o.out != "":
		return errors.New("--out needs the full rows, which only --tp 1 without --devices computes")
	case run.engine() && o.top > 20:
		return errors.New("--top is at most 20 with --tp > 1 or --devices (the engine's limit)")
	}
	return nil
}

// scoreOnRank is `score` at --tp 1 without --devices: each prompt on one
// rank in a device thread (onModel), printing JSON or writing the full rows
// to --out.
func scoreOnRank(ctx context.Context, stdout io.Writer, run placementFlags, in promptInput, o scoreOptions) error {
	return onModel(run, in, func(l *loaded, prompts [][]int32) error {
		rows := make([][]int, len(prompts))
		for i, ids := range prompts {
			var err error
			if rows[i], err = o.spec.resolve(len(ids)); err != nil {
				return fmt.Errorf("--positions: prompt %d: %w", i, err)
			}
		}
		results := make([]scored, len(prompts))
		for i, ids := range prompts {
			if err := ctx.Err(); err != nil {
				return err
			}
			var err error
			if results[i], err = scoreRows(l, ids, rows[i], o.chunk); err != nil {
				return fmt.Errorf("prompt %d: %w", i, err)
			}
		}
		if o.out != "" {
			meta := map[string]string{
				"what":  "cohort score: log-softmax (float32) of the next-token distribution at each listed position",
				"model": l.ck.Dir, "device": run.device, "positions": o.positions, "chunk": strconv.Itoa(o.chunk),
				"prompts": strconv.Itoa(len(prompts)),
			}
			if err := writeScores(o.out, results, in.nested, meta); err != nil {
				return err
			}
			for i, r := range results {
				fmt.Fprintf(stdout, "prompt %d: %d tokens, %d positions, vocab %d, %.3f s\n", i, len(r.ids), len(r.rows), r.vocab, r.seconds)
			}
			fmt.Fprintf(stdout, "wrote %s\n", o.out)
			return nil
		}
		all := make([][]scoredPosition, len(results))
		for i, r := range results {
			all[i] = r.json(o.top)
		}
		return encodeResults(indented(stdout), all, in.nested)
	})
}

// indented is score's JSON encoder.
func indented(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc
}

// scored is one prompt's output: the log-softmax rows [len(rows), vocab] of
// the positions rows.
type scored struct {
	ids      []int32
	rows     []int
	vocab    int
	logprobs []float32
	seconds  float64
}

// scoreRows runs ids through a fresh session in prefill chunks of chunk
// tokens (0: one step) and keeps the log-softmax of the positions rows
// (ascending). Only those rows go through the LM head.
func scoreRows(l *loaded, ids []int32, rows []int, chunk int) (scored, error) {
	start := time.Now()
	if chunk == 0 {
		chunk = len(ids)
	}
	s := model.NewSession(l.be, l.m, len(ids))
	r := scored{ids: ids, rows: rows}
	next := 0 // the first row not yet computed
	for lo := 0; lo < len(ids); lo += chunk {
		hi := min(lo+chunk, len(ids))
		var local []int
		for ; next < len(rows) && rows[next] < hi; next++ {
			local = append(local, rows[next]-lo)
		}
		logits, err := s.StepRows(ids[lo:hi], local)
		l.resetScratch()
		if err != nil {
			return r, err
		}
		if len(local) == 0 {
			continue
		}
		vocab := len(logits) / len(local)
		if r.vocab == 0 {
			r.vocab = vocab
			r.logprobs = make([]float32, 0, len(rows)*vocab)
		}
		for j := range local {
			for _, v := range sample.LogSoftmax(logits[j*vocab : (j+1)*vocab]) {
				r.logprobs = append(r.logprobs, float32(v))
			}
		}
	}
	r.seconds = time.Since(start).Seconds()
	return r, nil
}

// json renders the rows as `cohort score` JSON with top alternatives.
func (r scored) json(top int) []scoredPosition {
	out := make([]scoredPosition, len(r.rows))
	for k, pos := range r.rows {
		row := r.logprobs[k*r.vocab : (k+1)*r.vocab]
		lp := make([]float64, len(row))
		for i, v := range row {
			lp[i] = float64(v)
		}
		out[k] = scoredPosition{Position: pos, Token: r.ids[pos], Top: []scoredToken{}}
		for _, t := range sample.Top(lp, top) {
			out[k].Top = append(out[k].Top, scoredToken(t))
		}
		if pos+1 < len(r.ids) {
			out[k].Next = &scoredToken{ID: r.ids[pos+1], Logprob: lp[r.ids[pos+1]]}
		}
	}
	return out
}

// writeScores writes every prompt's logprobs [P, vocab] (F32), positions [P]
// and ids [len] (I32). A single prompt's tensors are named logprobs,
// positions and ids; with several (indexed) they get a ".<i>" suffix.
func writeScores(path string, results []scored, indexed bool, meta map[string]string) error {
	var ts []safetensors.Tensor
	for i, r := range results {
		suffix := ""
		if indexed {
			suffix = "." + strconv.Itoa(i)
		}
		vocab := r.vocab
		if len(r.rows) == 0 {
			vocab = 0
		}
		ts = append(ts,
			safetensors.Tensor{Name: "logprobs" + suffix, DType: safetensors.F32, Shape: []int{len(r.rows), vocab}, Data: safetensors.EncodeF32(r.logprobs)},
			safetensors.Tensor{Name: "positions" + suffix, DType: safetensors.I32, Shape: []int{len(r.rows)}, Data: safetensors.EncodeI32(toInt32(r.rows))},
			safetensors.Tensor{Name: "ids" + suffix, DType: safetensors.I32, Shape: []int{len(r.ids)}, Data: safetensors.EncodeI32(r.ids)},
		)
	}
	return safetensors.WriteFile(path, ts, meta)
}

func toInt32(xs []int) []int32 {
	out := make([]int32, len(xs))
	for i, x := range xs {
		out[i] = int32(x)
	}
	return out
}

// positionSpec is a parsed --positions value.
type positionSpec struct {
	kind   string // "all", "last", "stride" or "list"
	stride int
	list   []int
}

func parsePositionSpec(s string) (positionSpec, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "all" || s == "last":
		return positionSpec{kind: s}, nil
	case strings.HasPrefix(s, "stride:"):
		n, err := strconv.Atoi(strings.TrimPrefix(s, "stride:"))
		if err != nil || n < 1 {
			return positionSpec{}, fmt.Errorf("%q: the stride must be a positive integer", s)
		}
		return positionSpec{kind: "stride", stride: n}, nil
	case s == "":
		return positionSpec{}, errors.New(`empty (want "all", "last", "stride:N" or a list like 0,5,9)`)
	}
	var list []int
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 {
			return positionSpec{}, fmt.Errorf(`%q: want "all", "last", "stride:N" or a comma-separated list of positions ≥ 0`, s)
		}
		list = append(list, v)
	}
	slices.Sort(list)
	return positionSpec{kind: "list", list: slices.Compact(list)}, nil
}

// resolve returns the ascending positions of a prompt of n tokens.
func (p positionSpec) resolve(n int) ([]int, error) {
	var out []int
	switch p.kind {
	case "all":
		for i := range n {
			out = append(out, i)
		}
	case "last":
		out = []int{n - 1}
	case "stride":
		for i := 0; i < n; i += p.stride {
			out = append(out, i)
		}
		if out[len(out)-1] != n-1 {
			out = append(out, n-1)
		}
	case "list":
		if last := p.list[len(p.list)-1]; last >= n {
			return nil, fmt.Errorf("position %d is past the prompt's %d tokens", last, n)
		}
		out = slices.Clone(p.list)
	}
	return out, nil
}

// scoreOnEngine is `score` with --tp > 1 or --devices: each prompt through
// the engine (the ranks of serve), printing the same JSON as at --tp 1.
func scoreOnEngine(ctx context.Context, stdout io.Writer, run placementFlags, in promptInput, o scoreOptions) error {
	e, prompts, err := openEngine(ctx, run, in, 1)
	if err != nil {
		return err
	}
	defer e.Close()
	all := make([][]scoredPosition, len(prompts))
	for i, ids := range prompts {
		rows, err := o.spec.resolve(len(ids))
		if err != nil {
			return fmt.Errorf("--positions: prompt %d: %w", i, err)
		}
		if all[i], err = e.score(ctx, ids, rows, o.top); err != nil {
			return fmt.Errorf("prompt %d: %w", i, err)
		}
	}
	return encodeResults(indented(stdout), all, in.nested)
}
