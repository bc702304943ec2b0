package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"cohort/model"
	"cohort/model/safetensors"
	"cohort/model/sample"
	"cohort/model/tokenizer"
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
	fs := flag.NewFlagSet("score", flag.ContinueOnError)
	dir := fs.String("model", "", "model directory (default: the built-in tiny model)")
	tokens := fs.String("tokens", "", "comma-separated token ids")
	prompt := fs.String("prompt", "", "text to tokenize and score (instead of --tokens)")
	idsFile := fs.String("ids-file", "", "JSON file of token ids: one prompt [1,2,...] or several [[...],[...]] (instead of --tokens)")
	top := fs.Int("top", 8, "alternatives per position (JSON output)")
	device := fs.String("device", "cpu", "backend: cpu or cuda")
	threads := fs.Int("threads", 0, "CPU backend workers (0: GOMAXPROCS)")
	positions := fs.String("positions", "all", `positions to output: "all", "last", "stride:N" (0, N, 2N, ... and the last) or a comma-separated list`)
	out := fs.String("out", "", "write the full log-softmax rows of the chosen positions to this .safetensors file instead of JSON")
	chunk := fs.Int("chunk", 2048, "prefill chunk in tokens (0: the whole prompt in one step; at --tp 1 without --devices)")
	tp := fs.Int("tp", 1, "tensor-parallel degree (ranks); above 1, or with --devices, the prompt runs through the engine as in serve (--top at most 20, no --out)")
	devices := fs.String("devices", "", "with --device cuda: GPU of each rank, comma-separated, e.g. 1,0 (default 0..tp-1)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	inputs := 0
	for _, s := range []string{*tokens, *prompt, *idsFile} {
		if s != "" {
			inputs++
		}
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("score: unexpected arguments %q", fs.Args())
	case inputs != 1:
		return errors.New("score: give exactly one of --tokens, --prompt and --ids-file")
	case *top < 0:
		return errors.New("score: --top must not be negative")
	case *chunk < 0:
		return errors.New("score: --chunk must not be negative")
	case *threads < 0:
		return errors.New("score: --threads must not be negative")
	case *out != "" && !strings.HasSuffix(*out, ".safetensors"):
		return fmt.Errorf("score: --out %q: want a .safetensors file name", *out)
	case *tp < 1:
		return errors.New("score: --tp must be at least 1")
	}
	onEngine := *tp > 1 || *devices != ""
	switch {
	case onEngine && *out != "":
		return errors.New("score: --out needs the full rows, which only --tp 1 without --devices computes")
	case onEngine && *top > 20:
		return errors.New("score: --top is at most 20 with --tp > 1 or --devices (the engine's limit)")
	}
	spec, err := parsePositionSpec(*positions)
	if err != nil {
		return fmt.Errorf("score: --positions: %w", err)
	}
	var fileIDs [][]int32
	nested := false // several prompts: indexed tensors, an array of JSON results
	if *idsFile != "" {
		if fileIDs, nested, err = readIDsFile(*idsFile); err != nil {
			return fmt.Errorf("score: --ids-file: %w", err)
		}
	}
	if _, _, _, err := backendFactory(*device, *threads); err != nil {
		return fmt.Errorf("score: %w", err)
	}
	if onEngine {
		return scoreOnEngine(ctx, stdout, *dir, *device, *devices, *tp, *threads, fileIDs, nested, *tokens, *prompt, spec, *top)
	}
	return onDeviceThread(func() error {
		l, err := loadModelOn(*dir, *device, *threads)
		if err != nil {
			return err
		}
		defer l.Close()
		prompts := fileIDs
		if prompts == nil {
			if *prompt != "" {
				if err := l.needTokenizer(); err != nil {
					return err
				}
			}
			ids, err := scoreInput(l.tok, l.ck.Config.VocabSize, *tokens, *prompt)
			if err != nil {
				return err
			}
			prompts = [][]int32{ids}
		} else if err := checkVocab(fileIDs, l.ck.Config.VocabSize, "--ids-file"); err != nil {
			return fmt.Errorf("score: %w", err)
		}
		rows := make([][]int, len(prompts))
		for i, ids := range prompts {
			if rows[i], err = spec.resolve(len(ids)); err != nil {
				return fmt.Errorf("score: --positions: prompt %d: %w", i, err)
			}
		}
		results := make([]scored, len(prompts))
		for i, ids := range prompts {
			if err := ctx.Err(); err != nil {
				return err
			}
			if results[i], err = scoreRows(l, ids, rows[i], *chunk); err != nil {
				return fmt.Errorf("score: prompt %d: %w", i, err)
			}
		}
		if *out != "" {
			meta := map[string]string{
				"what":  "cohort score: log-softmax (float32) of the next-token distribution at each listed position",
				"model": l.ck.Dir, "device": *device, "positions": *positions, "chunk": strconv.Itoa(*chunk),
				"prompts": strconv.Itoa(len(prompts)),
			}
			if err := writeScores(*out, results, nested, meta); err != nil {
				return fmt.Errorf("score: %w", err)
			}
			for i, r := range results {
				fmt.Fprintf(stdout, "prompt %d: %d tokens, %d positions, vocab %d, %.3f s\n", i, len(r.ids), len(r.rows), r.vocab, r.seconds)
			}
			fmt.Fprintf(stdout, "wrote %s\n", *out)
			return nil
		}
		all := make([][]scoredPosition, len(results))
		for i, r := range results {
			all[i] = r.json(*top)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if nested {
			return enc.Encode(all)
		}
		return enc.Encode(all[0])
	})
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
			safetensors.Tensor{Name: "positions" + suffix, DType: safetensors.I32, Shape: []int{len(r.rows)}, Data: encodeI32(toInt32(r.rows))},
			safetensors.Tensor{Name: "ids" + suffix, DType: safetensors.I32, Shape: []int{len(r.ids)}, Data: encodeI32(r.ids)},
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

func encodeI32(xs []int32) []byte {
	b := make([]byte, 0, 4*len(xs))
	for _, x := range xs {
		b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
	}
	return b
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

// readIDsFile reads a JSON array of token ids (one prompt), or an array of
// such arrays (nested: several prompts).
func readIDsFile(path string) (prompts [][]int32, nested bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	var one []int32
	if err := json.Unmarshal(data, &one); err == nil {
		if len(one) == 0 {
			return nil, false, fmt.Errorf("%s: no token ids", path)
		}
		return [][]int32{one}, false, nil
	}
	var many [][]int32
	if err := json.Unmarshal(data, &many); err != nil {
		return nil, false, fmt.Errorf("%s: want a JSON array of token ids or an array of such arrays: %w", path, err)
	}
	if len(many) == 0 {
		return nil, false, fmt.Errorf("%s: no prompts", path)
	}
	for i, ids := range many {
		if len(ids) == 0 {
			return nil, false, fmt.Errorf("%s: prompt %d has no token ids", path, i)
		}
	}
	return many, true, nil
}

// checkVocab rejects ids outside [0, vocab).
func checkVocab(prompts [][]int32, vocab int, flagName string) error {
	for i, ids := range prompts {
		for _, id := range ids {
			if id < 0 || int(id) >= vocab {
				return fmt.Errorf("%s: prompt %d: id %d is outside the vocabulary [0, %d)", flagName, i, id, vocab)
			}
		}
	}
	return nil
}

func scoreInput(tok *tokenizer.Tokenizer, vocab int, tokens, prompt string) ([]int32, error) {
	if prompt != "" {
		ids := tok.Encode(prompt)
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
		if v < 0 || int(v) >= vocab {
			return nil, fmt.Errorf("score: --tokens: id %d is outside the vocabulary [0, %d)", v, vocab)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

// scoreOnEngine is `score` with --tp > 1 or --devices: each prompt through
// the engine (the ranks of serve), printing the same JSON as at --tp 1.
func scoreOnEngine(ctx context.Context, stdout io.Writer, dir, device, devices string, tp, threads int,
	prompts [][]int32, nested bool, tokens, prompt string, spec positionSpec, top int) error {
	e, err := openRun(dir)
	if err != nil {
		return err
	}
	defer e.Close()
	vocab := e.ck.Config.VocabSize
	if prompts == nil {
		ids, err := scoreInput(e.tok, vocab, tokens, prompt)
		if err != nil {
			return err
		}
		prompts = [][]int32{ids}
	} else if err := checkVocab(prompts, vocab, "--ids-file"); err != nil {
		return fmt.Errorf("score: %w", err)
	}
	longest := 0
	for _, ids := range prompts {
		longest = max(longest, len(ids))
	}
	if err := e.start(ctx, device, devices, tp, threads, longest+1); err != nil {
		return fmt.Errorf("score: %w", err)
	}
	all := make([][]scoredPosition, len(prompts))
	for i, ids := range prompts {
		rows, err := spec.resolve(len(ids))
		if err != nil {
			return fmt.Errorf("score: --positions: prompt %d: %w", i, err)
		}
		if all[i], err = e.score(ctx, ids, rows, top); err != nil {
			return fmt.Errorf("score: prompt %d: %w", i, err)
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if nested {
		return enc.Encode(all)
	}
	return enc.Encode(all[0])
}
