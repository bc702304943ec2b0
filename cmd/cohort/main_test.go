package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// tinyDir writes the tiny preset through `cohort make-model` and returns
// its directory.
func tinyDir(t *testing.T) string { return presetDir(t, "tiny") }

// presetDir writes a generated model of preset with `cohort make-model`.
func presetDir(t *testing.T, preset string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), preset)
	var out bytes.Buffer
	if err := dispatch(context.Background(), []string{"make-model", "--preset", preset, "--out", dir}, &out); err != nil {
		t.Fatalf("make-model: %v", err)
	}
	if !strings.Contains(out.String(), "wrote "+preset+" model to "+dir) {
		t.Fatalf("make-model output %q does not name the directory", out.String())
	}
	return dir
}

// checkScore checks `cohort score` JSON: want positions, each with top
// entries whose logprobs are ≤ 0 and sorted descending, and a next-token
// logprob on every position but the last.
func checkScore(t *testing.T, out string, positions, top int) {
	t.Helper()
	var got []scoredPosition
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if positions >= 0 && len(got) != positions {
		t.Fatalf("%d positions, want %d", len(got), positions)
	}
	if len(got) == 0 {
		t.Fatal("no positions")
	}
	for i, p := range got {
		if p.Position != i {
			t.Errorf("entry %d has position %d", i, p.Position)
		}
		if len(p.Top) != top {
			t.Errorf("position %d: %d top entries, want %d", i, len(p.Top), top)
		}
		for j, e := range p.Top {
			if e.Logprob > 0 {
				t.Errorf("position %d: top[%d] logprob %g > 0", i, j, e.Logprob)
			}
			if j > 0 && e.Logprob > p.Top[j-1].Logprob {
				t.Errorf("position %d: top not sorted descending: %g after %g", i, e.Logprob, p.Top[j-1].Logprob)
			}
		}
		if last := i == len(got)-1; last != (p.Next == nil) {
			t.Errorf("position %d of %d: next = %v", i, len(got), p.Next)
		} else if !last {
			if p.Next.ID != got[i+1].Token || p.Next.Logprob > 0 || p.Next.Logprob > p.Top[0].Logprob {
				t.Errorf("position %d: next %+v (following token %d, best %g)", i, *p.Next, got[i+1].Token, p.Top[0].Logprob)
			}
		}
	}
}

func TestDispatch(t *testing.T) {
	dir := tinyDir(t)
	tests := []struct {
		name    string
		args    []string // "$MODEL" is replaced by the tiny model's directory
		wantErr string   // substring of the error; "" means success
		check   func(t *testing.T, out string)
	}{
		{name: "help lists commands", args: []string{"help"}, check: func(t *testing.T, out string) {
			for _, c := range []string{"make-model", "generate", "score"} {
				if !strings.Contains(out, "  "+c+" ") {
					t.Errorf("help does not list %s:\n%s", c, out)
				}
			}
		}},
		{name: "no args is help", args: nil, check: func(t *testing.T, out string) {
			if !strings.HasPrefix(out, "usage: cohort") {
				t.Errorf("got %q", out)
			}
		}},
		{name: "unknown command", args: []string{"frobnicate"}, wantErr: `unknown command "frobnicate"`},
		{name: "generate writes text", args: []string{"generate", "--model", "$MODEL", "--max-tokens", "5"},
			check: func(t *testing.T, out string) {
				if strings.TrimSpace(out) == "" {
					t.Errorf("generate wrote no text: %q", out)
				}
			}},
		{name: "generate sampled", args: []string{"generate", "--model", "$MODEL", "--max-tokens", "3", "--temperature", "0.8", "--top-k", "5", "--seed", "7"},
			check: func(t *testing.T, out string) {
				if !strings.HasSuffix(out, "\n") {
					t.Errorf("output %q does not end the line", out)
				}
			}},
		{name: "generate max-tokens 0", args: []string{"generate", "--model", "$MODEL", "--max-tokens", "0"}, wantErr: "--max-tokens"},
		{name: "score tokens", args: []string{"score", "--model", "$MODEL", "--tokens", "1,2,3", "--top", "3"},
			check: func(t *testing.T, out string) { checkScore(t, out, 3, 3) }},
		{name: "score prompt", args: []string{"score", "--model", "$MODEL", "--prompt", "Hello, Cohort", "--top", "4"},
			check: func(t *testing.T, out string) { checkScore(t, out, -1, 4) }},
		{name: "score out-of-vocab id", args: []string{"score", "--model", "$MODEL", "--tokens", "1,512"}, wantErr: "id 512 is outside the vocabulary [0, 512)"},
		{name: "score negative id", args: []string{"score", "--model", "$MODEL", "--tokens", "-1"}, wantErr: "outside the vocabulary"},
		{name: "score non-numeric id", args: []string{"score", "--model", "$MODEL", "--tokens", "1,x"}, wantErr: `"x" is not a token id`},
		{name: "score both inputs", args: []string{"score", "--model", "$MODEL", "--tokens", "1", "--prompt", "hi"}, wantErr: "exactly one of --tokens, --prompt and --ids-file"},
		{name: "score neither input", args: []string{"score", "--model", "$MODEL"}, wantErr: "exactly one of --tokens, --prompt and --ids-file"},
		{name: "make-model unknown preset", args: []string{"make-model", "--preset", "huge", "--out", "$MODEL-x"}, wantErr: `unknown preset "huge"`},
		{name: "make-model without out", args: []string{"make-model"}, wantErr: "--out is required"},
		{name: "missing model dir", args: []string{"score", "--model", "$MODEL-nope", "--tokens", "1"}, wantErr: "config.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				args[i] = strings.ReplaceAll(a, "$MODEL", dir)
			}
			var out bytes.Buffer
			err := dispatch(context.Background(), args, &out)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("dispatch(%q): %v", args, err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("dispatch(%q) succeeded, want an error with %q; output:\n%s", args, tt.wantErr, out.String())
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("dispatch(%q): error %q, want it to contain %q", args, err, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, out.String())
			}
		})
	}
}

// TestGenerateDeterministic: greedy generation is a pure function of the
// model and the prompt.
func TestGenerateDeterministic(t *testing.T) {
	dir := tinyDir(t)
	run := func() string {
		var out bytes.Buffer
		if err := dispatch(context.Background(), []string{"generate", "--model", dir, "--prompt", "abc", "--max-tokens", "8"}, &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("two greedy runs differ: %q vs %q", a, b)
	}
}

// TestGenerateCancelled: a cancelled context stops generation with its error.
func TestGenerateCancelled(t *testing.T) {
	dir := tinyDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	err := dispatch(ctx, []string{"generate", "--model", dir, "--max-tokens", "5"}, &out)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestHelpEveryCommand: -h, -help and --help print the command's usage to
// stdout and succeed for every command, with one plain word as each flag's
// placeholder (a backquoted word in a usage string becomes the placeholder,
// which garbled `serve -h`).
func TestHelpEveryCommand(t *testing.T) {
	flagLine := regexp.MustCompile(`^  -[a-z][a-z0-9-]*( [a-z]+)?$`)
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		for _, h := range []string{"-h", "-help", "--help"} {
			t.Run(name+" "+h, func(t *testing.T) {
				var out bytes.Buffer
				if err := dispatch(context.Background(), []string{name, h}, &out); err != nil {
					t.Fatalf("error %v", err)
				}
				text := out.String()
				if !strings.HasPrefix(text, "usage: cohort "+name+" [flags]\n\n"+commands[name].summary+".\n") {
					t.Errorf("usage does not start with the command's synopsis and summary:\n%s", text)
				}
				flags := 0
				for _, line := range strings.Split(text, "\n") {
					if strings.HasPrefix(line, "  -") {
						flags++
						if !flagLine.MatchString(line) {
							t.Errorf("garbled flag line %q", line)
						}
					}
				}
				if flags == 0 {
					t.Errorf("no flags listed:\n%s", text)
				}
			})
		}
	}
}

// TestBadFlag: an unknown flag is an error naming the command and -h.
func TestBadFlag(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		var out bytes.Buffer
		err := dispatch(context.Background(), []string{name, "--no-such-flag"}, &out)
		if err == nil || !strings.Contains(err.Error(), "no-such-flag") || !strings.Contains(err.Error(), "cohort "+name+" -h") {
			t.Errorf("%s: error %v", name, err)
		}
		if out.Len() != 0 {
			t.Errorf("%s: wrote %q to stdout", name, out.String())
		}
	}
}

// TestTensorParallelCLI: generate and score at --tp 2 and 4 (through the
// engine) agree with --tp 1 (the single-rank model): score's logprobs
// within 1e-3 (float32 partial sums in another order), generate's tokens
// wherever --tp 1's top-1 margin leaves room for that noise.
func TestTensorParallelCLI(t *testing.T) {
	dir := tinyDir(t)
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := dispatch(context.Background(), append(args, "--model", dir), &out); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		return out.String()
	}
	scoreArgs := []string{"score", "--tokens", "3,60,255,17,400,9,120,77", "--top", "4"}
	genArgs := []string{"generate", "--tokens", "5,6,7,300", "--max-tokens", "12"}
	var refScore []scoredPosition
	var refGen generated
	if err := json.Unmarshal([]byte(run(t, scoreArgs...)), &refScore); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(run(t, genArgs...)), &refGen); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{"2", "4"} {
		t.Run("tp="+tp, func(t *testing.T) {
			out := run(t, append(scoreArgs, "--tp", tp)...)
			checkScore(t, out, len(refScore), 4)
			var got []scoredPosition
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if d := math.Abs(got[i].Top[0].Logprob - refScore[i].Top[0].Logprob); d > 1e-3 {
					t.Errorf("score position %d: best logprob differs by %g", i, d)
				}
				if got[i].Next != nil && math.Abs(got[i].Next.Logprob-refScore[i].Next.Logprob) > 1e-3 {
					t.Errorf("score position %d: next %v, --tp 1 %v", i, *got[i].Next, *refScore[i].Next)
				}
			}
			var g generated
			if err := json.Unmarshal([]byte(run(t, append(genArgs, "--tp", tp)...)), &g); err != nil {
				t.Fatal(err)
			}
			if g.PromptTokens != 4 || len(g.Tokens) != len(refGen.Tokens) || g.Finish != refGen.Finish {
				t.Fatalf("generate %+v, --tp 1 %+v", g, refGen)
			}
			for i := range g.Tokens {
				if g.Tokens[i] != refGen.Tokens[i] {
					t.Fatalf("token %d: %d, --tp 1 %d (margin %g)", i, g.Tokens[i], refGen.Tokens[i], refGen.Margins[i])
				}
				if refGen.Margins[i] < 1e-3 {
					break // a near tie: the rest may diverge
				}
			}
		})
	}
	errs := []struct {
		args []string
		want string
	}{
		{[]string{"score", "--tokens", "1,2", "--tp", "2", "--out", filepath.Join(t.TempDir(), "x.safetensors")}, "--out needs the full rows"},
		{[]string{"score", "--tokens", "1,2", "--tp", "2", "--top", "21"}, "--top is at most 20"},
		{[]string{"score", "--tokens", "1,2", "--tp", "0"}, "--tp must be at least 1"},
		{[]string{"generate", "--tp", "0"}, "--tp must be at least 1"},
		{[]string{"generate", "--devices", "0"}, "--devices applies only to --device cuda"},
		{[]string{"score", "--tokens", "1", "--devices", "0"}, "--devices applies only to --device cuda"},
	}
	for _, e := range errs {
		var out bytes.Buffer
		err := dispatch(context.Background(), append(e.args, "--model", dir), &out)
		if err == nil || !strings.Contains(err.Error(), e.want) {
			t.Errorf("%q: error %v, want %q", e.args, err, e.want)
		}
	}
}
