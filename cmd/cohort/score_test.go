package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cohort/model/safetensors"
)

func TestPositionSpec(t *testing.T) {
	tests := []struct {
		spec    string
		n       int
		want    []int
		wantErr string
	}{
		{spec: "all", n: 4, want: []int{0, 1, 2, 3}},
		{spec: "last", n: 4, want: []int{3}},
		{spec: "last", n: 1, want: []int{0}},
		{spec: "stride:64", n: 200, want: []int{0, 64, 128, 192, 199}},
		{spec: "stride:64", n: 129, want: []int{0, 64, 128}},
		{spec: "stride:1", n: 3, want: []int{0, 1, 2}},
		{spec: "stride:8", n: 1, want: []int{0}},
		{spec: "5, 1,5,0", n: 6, want: []int{0, 1, 5}},
		{spec: "5", n: 5, wantErr: "position 5 is past the prompt's 5 tokens"},
		{spec: "stride:0", wantErr: "the stride must be a positive integer"},
		{spec: "stride:x", wantErr: "the stride must be a positive integer"},
		{spec: "", wantErr: "empty"},
		{spec: "first", wantErr: `want "all", "last", "stride:N"`},
		{spec: "1,-2", wantErr: "positions ≥ 0"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			spec, err := parsePositionSpec(tt.spec)
			var got []int
			if err == nil {
				got, err = spec.resolve(tt.n)
			}
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case !slices.Equal(got, tt.want):
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ids.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readScoreFile returns a score --out file's tensors as float32 / int32.
func readScoreFile(t *testing.T, path string) (map[string][]float32, map[string][]int32, map[string][]int) {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fl, in, shapes := map[string][]float32{}, map[string][]int32{}, map[string][]int{}
	for _, n := range f.Names() {
		ts, _ := f.Tensor(n)
		shapes[n] = ts.Shape
		switch ts.DType {
		case safetensors.F32:
			if fl[n], err = ts.Float32(); err != nil {
				t.Fatal(err)
			}
		case safetensors.I32:
			if in[n], err = ts.Int32s(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("tensor %s has dtype %s", n, ts.DType)
		}
	}
	return fl, in, shapes
}

// TestScoreOut: --out writes the log-softmax rows of exactly the chosen
// positions; they equal the JSON output's top logprobs, each row is
// normalized, and the prefill chunk size does not change them.
func TestScoreOut(t *testing.T) {
	prompts := [][]int32{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {40, 41, 42}}
	ids := writeJSON(t, prompts)
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := dispatch(context.Background(), append([]string{"score"}, args...), &out); err != nil {
			t.Fatalf("score %q: %v", args, err)
		}
		return out.String()
	}
	chunked := filepath.Join(dir, "chunked.safetensors")
	whole := filepath.Join(dir, "whole.safetensors")
	text := run("--ids-file", ids, "--positions", "stride:4", "--chunk", "3", "--out", chunked)
	if !strings.Contains(text, "prompt 0: 11 tokens, 4 positions, vocab 512") || !strings.Contains(text, "wrote "+chunked) {
		t.Errorf("summary:\n%s", text)
	}
	run("--ids-file", ids, "--positions", "stride:4", "--chunk", "0", "--out", whole)

	fl, in, shapes := readScoreFile(t, chunked)
	wfl, _, _ := readScoreFile(t, whole)
	wantPos := [][]int32{{0, 4, 8, 10}, {0, 2}}
	for i, p := range prompts {
		s := "." + string(rune('0'+i))
		if !slices.Equal(in["ids"+s], p) {
			t.Errorf("ids%s = %v, want %v", s, in["ids"+s], p)
		}
		if !slices.Equal(in["positions"+s], wantPos[i]) {
			t.Errorf("positions%s = %v, want %v", s, in["positions"+s], wantPos[i])
		}
		if got := shapes["logprobs"+s]; !slices.Equal(got, []int{len(wantPos[i]), 512}) {
			t.Errorf("logprobs%s shape %v", s, got)
		}
		rows := fl["logprobs"+s]
		for r := range len(wantPos[i]) {
			sum := 0.0
			for _, v := range rows[r*512 : (r+1)*512] {
				sum += math.Exp(float64(v))
			}
			if math.Abs(sum-1) > 1e-4 {
				t.Errorf("prompt %d row %d: probabilities sum to %g", i, r, sum)
			}
		}
		for k, v := range rows {
			if d := math.Abs(float64(v - wfl["logprobs"+s][k])); d > 2e-4 {
				t.Fatalf("prompt %d: chunked and whole prefill differ by %g at %d", i, d, k)
			}
		}
	}

	// The JSON output of the same positions (one prefill step, as "whole")
	// carries the same numbers.
	var js [][]scoredPosition
	if err := json.Unmarshal([]byte(run("--ids-file", ids, "--positions", "stride:4", "--top", "2")), &js); err != nil {
		t.Fatal(err)
	}
	if len(js) != 2 || len(js[0]) != 4 || js[0][3].Position != 10 || js[0][3].Next != nil || js[0][1].Next == nil {
		t.Fatalf("JSON output %+v", js)
	}
	for k, p := range js[0] {
		for _, tok := range p.Top {
			if d := math.Abs(tok.Logprob - float64(wfl["logprobs.0"][k*512+int(tok.ID)])); d > 1e-6 {
				t.Errorf("position %d token %d: JSON %g vs file", p.Position, tok.ID, tok.Logprob)
			}
		}
	}

	// One prompt (a flat array): unsuffixed tensor names and a flat JSON array.
	single := filepath.Join(dir, "single.safetensors")
	run("--ids-file", writeJSON(t, prompts[1]), "--positions", "last", "--out", single)
	_, in1, shapes1 := readScoreFile(t, single)
	if !slices.Equal(in1["positions"], []int32{2}) || !slices.Equal(shapes1["logprobs"], []int{1, 512}) {
		t.Errorf("single prompt file: positions %v, shapes %v", in1["positions"], shapes1)
	}
	checkScore(t, run("--tokens", "40,41,42", "--top", "3"), 3, 3)
}

func TestScoreFlags(t *testing.T) {
	good := writeJSON(t, []int32{1, 2, 3})
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no input", nil, "exactly one of --tokens, --prompt and --ids-file"},
		{"two inputs", []string{"--tokens", "1", "--ids-file", good}, "exactly one of"},
		{"bad positions", []string{"--tokens", "1", "--positions", "stride:-1"}, "--positions"},
		{"position past the end", []string{"--tokens", "1,2", "--positions", "7"}, "position 7 is past the prompt's 2 tokens"},
		{"out not safetensors", []string{"--tokens", "1", "--out", "x.json"}, "want a .safetensors file name"},
		{"unknown device", []string{"--tokens", "1", "--device", "tpu"}, "unknown --device"},
		{"negative chunk", []string{"--tokens", "1", "--chunk", "-1"}, "--chunk"},
		{"missing ids file", []string{"--ids-file", filepath.Join(t.TempDir(), "nope.json")}, "no such file"},
		{"empty ids", []string{"--ids-file", writeJSON(t, []int32{})}, "no token ids"},
		{"empty prompt in list", []string{"--ids-file", writeJSON(t, [][]int32{{1}, {}})}, "prompt 1 has no token ids"},
		{"not ids", []string{"--ids-file", writeJSON(t, map[string]int{"a": 1})}, "want a JSON array of token ids"},
		{"id outside vocab", []string{"--ids-file", writeJSON(t, [][]int32{{1}, {512}})}, "prompt 1: id 512 is outside the vocabulary [0, 512)"},
		{"extra args", []string{"--tokens", "1", "extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := dispatch(context.Background(), append([]string{"score"}, tt.args...), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, _, _, err := backendFactory("cuda", 1); err != nil {
		// A binary without -tags cuda says how to get one.
		err := dispatch(context.Background(), []string{"score", "--tokens", "1", "--device", "cuda"}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "make build-cuda") {
			t.Errorf("--device cuda without CUDA: %v", err)
		}
	}
}

func TestGenerateIDs(t *testing.T) {
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := dispatch(context.Background(), append([]string{"generate"}, args...), &out)
		return out.String(), err
	}
	out, err := run("--tokens", "1,2,3", "--max-tokens", "6", "--ignore-eos")
	if err != nil {
		t.Fatal(err)
	}
	var one generated
	if err := json.Unmarshal([]byte(out), &one); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if one.PromptTokens != 3 || len(one.Tokens) != 6 || len(one.Margins) != 6 || one.Finish != "length" {
		t.Fatalf("generate --tokens: %+v", one)
	}
	for _, m := range one.Margins {
		if m < 0 {
			t.Errorf("negative margin %g", m)
		}
	}
	// Several prompts from a file: one result each, the first equal to the
	// --tokens run (greedy is deterministic), on the same CPU backend.
	out, err = run("--ids-file", writeJSON(t, [][]int32{{1, 2, 3}, {9}}), "--max-tokens", "6", "--ignore-eos", "--prefill-chunk", "2")
	if err != nil {
		t.Fatal(err)
	}
	var many []generated
	if err := json.Unmarshal([]byte(out), &many); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(many) != 2 || !slices.Equal(many[0].Tokens, one.Tokens) || many[1].PromptTokens != 1 {
		t.Fatalf("generate --ids-file: %+v (want the first to be %v)", many, one.Tokens)
	}
	out, err = run("--prompt", "abc", "--max-tokens", "3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var withText generated
	if err := json.Unmarshal([]byte(out), &withText); err != nil || withText.Text == "" {
		t.Fatalf("generate --json: %v %s", err, out)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--tokens", "1", "--ids-file", "x.json"}, "at most one of --tokens and --ids-file"},
		{[]string{"--tokens", "1,x"}, `"x" is not a token id`},
		{[]string{"--tokens", "600"}, "outside the vocabulary"},
		{[]string{"--device", "tpu"}, "unknown --device"},
		{[]string{"stray"}, "unexpected arguments"},
	} {
		if _, err := run(tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("generate %q: err %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}
