package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
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
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	dir := fs.String("model", "", "model directory (default: the built-in tiny model)")
	prompt := fs.String("prompt", "Hello", "prompt text")
	tokens := fs.String("tokens", "", "comma-separated prompt token ids (instead of --prompt; implies --json)")
	idsFile := fs.String("ids-file", "", "JSON file of prompt token ids: [1,2,...] or several prompts [[...],[...]] (instead of --prompt; implies --json)")
	maxTokens := fs.Int("max-tokens", 32, "tokens to generate")
	temp := fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
	topK := fs.Int("top-k", 0, "top-k (0 = off)")
	topP := fs.Float64("top-p", 1, "top-p (1 = off)")
	seed := fs.Uint64("seed", 0, "sampling seed")
	chunk := fs.Int("prefill-chunk", 512, "prefill chunk size in tokens")
	device := fs.String("device", "cpu", "backend: cpu or cuda")
	threads := fs.Int("threads", 0, "CPU backend workers (0: GOMAXPROCS)")
	ignoreEOS := fs.Bool("ignore-eos", false, "keep generating past the model's EOS tokens")
	asJSON := fs.Bool("json", false, "print the generated token ids (and text) as JSON")
	tp := fs.Int("tp", 1, "tensor-parallel degree (ranks); above 1, or with --devices, generation runs through the engine as in serve")
	devices := fs.String("devices", "", "with --device cuda: GPU of each rank, comma-separated, e.g. 1,0 (default 0..tp-1)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	params := sample.Params{Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed}
	if err := params.Validate(); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("generate: unexpected arguments %q", fs.Args())
	case *maxTokens < 1 || *chunk < 1:
		return fmt.Errorf("generate: --max-tokens and --prefill-chunk must be positive")
	case *tokens != "" && *idsFile != "":
		return errors.New("generate: give at most one of --tokens and --ids-file")
	case *threads < 0:
		return errors.New("generate: --threads must not be negative")
	case *tp < 1:
		return errors.New("generate: --tp must be at least 1")
	}
	var prompts [][]int32
	nested := false
	switch {
	case *tokens != "":
		ids, err := parseIDs(*tokens)
		if err != nil {
			return fmt.Errorf("generate: --tokens: %w", err)
		}
		prompts = [][]int32{ids}
	case *idsFile != "":
		var err error
		if prompts, nested, err = readIDsFile(*idsFile); err != nil {
			return fmt.Errorf("generate: --ids-file: %w", err)
		}
	}
	if _, _, _, err := backendFactory(*device, *threads); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if *tp > 1 || *devices != "" {
		return generateOnEngine(ctx, stdout, generateArgs{dir: *dir, device: *device, devices: *devices, tp: *tp, threads: *threads,
			prompts: prompts, nested: nested, prompt: *prompt, maxTokens: *maxTokens, params: params, ignoreEOS: *ignoreEOS, asJSON: *asJSON})
	}
	return onDeviceThread(func() error {
		l, err := loadModelOn(*dir, *device, *threads)
		if err != nil {
			return err
		}
		defer l.Close()
		if prompts != nil {
			if err := checkVocab(prompts, l.ck.Config.VocabSize, "generate: prompt"); err != nil {
				return err
			}
			var all []generated
			for _, ids := range prompts {
				g, err := l.generate(ctx, ids, *maxTokens, *chunk, params, *ignoreEOS, nil)
				if err != nil {
					return err
				}
				all = append(all, g)
			}
			enc := json.NewEncoder(stdout)
			if nested {
				return enc.Encode(all)
			}
			return enc.Encode(all[0])
		}
		if err := l.needTokenizer(); err != nil {
			return err
		}
		ids := l.tok.Encode(*prompt)
		if len(ids) == 0 {
			return fmt.Errorf("generate: the prompt encodes to no tokens")
		}
		dec := l.tok.NewStreamDecoder()
		var text strings.Builder
		emit := func(id int32) {
			s := dec.Add(id)
			if *asJSON {
				text.WriteString(s)
			} else {
				fmt.Fprint(stdout, s)
			}
		}
		g, err := l.generate(ctx, ids, *maxTokens, *chunk, params, *ignoreEOS, emit)
		if err != nil {
			return err
		}
		if !*asJSON {
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

// parseIDs parses comma-separated token ids.
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a token id", f)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
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

// generateArgs are generate's inputs for generateOnEngine.
type generateArgs struct {
	dir, device, devices string
	tp, threads          int
	prompts              [][]int32 // token-id prompts (--tokens, --ids-file), or nil for prompt
	nested               bool      // --ids-file held a list of prompts
	prompt               string
	maxTokens            int
	params               sample.Params
	ignoreEOS, asJSON    bool
}

// generateOnEngine is `generate` with --tp > 1 or --devices: each prompt
// through the engine (the ranks of serve), printing what --tp 1 prints (the
// generated text, or JSON).
func generateOnEngine(ctx context.Context, stdout io.Writer, a generateArgs) error {
	e, err := openRun(a.dir)
	if err != nil {
		return err
	}
	defer e.Close()
	prompts, text := a.prompts, a.prompts == nil
	if text {
		ids := e.tok.Encode(a.prompt)
		if len(ids) == 0 {
			return fmt.Errorf("generate: the prompt encodes to no tokens")
		}
		prompts = [][]int32{ids}
	} else if err := checkVocab(prompts, e.ck.Config.VocabSize, "generate: prompt"); err != nil {
		return err
	}
	longest := 0
	for _, ids := range prompts {
		longest = max(longest, len(ids))
	}
	if err := e.start(ctx, a.device, a.devices, a.tp, a.threads, longest+a.maxTokens); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if text && !a.asJSON {
		if _, err := e.generate(ctx, prompts[0], a.maxTokens, a.params, a.ignoreEOS, func(s string) { fmt.Fprint(stdout, s) }); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		return nil
	}
	var all []generated
	for _, ids := range prompts {
		var out strings.Builder
		g, err := e.generate(ctx, ids, a.maxTokens, a.params, a.ignoreEOS, func(s string) { out.WriteString(s) })
		if err != nil {
			return err
		}
		if text {
			g.Text = out.String()
		}
		all = append(all, g)
	}
	enc := json.NewEncoder(stdout)
	if a.nested {
		return enc.Encode(all)
	}
	return enc.Encode(all[0])
}
