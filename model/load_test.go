package model_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/kernels/cpu"
	"cohort/model"
	_ "cohort/model/qwen35" // registers the Qwen3.5 architectures
	"cohort/model/safetensors"
)

// tinyCheckpoint writes the tiny preset (tied, nested config, every tensor
// under model.language_model.) into a fresh directory.
func tinyCheckpoint(t *testing.T) string {
	t.Helper()
	return archtest.WritePreset(t, "tiny")
}

// readTensors returns copies of every tensor of dir's model.safetensors.
func readTensors(t *testing.T, dir string) map[string]safetensors.Tensor {
	t.Helper()
	f, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]safetensors.Tensor{}
	for _, n := range f.Names() {
		tt, _ := f.Tensor(n)
		tt.Shape = slices.Clone(tt.Shape)
		tt.Data = slices.Clone(tt.Data) // the original aliases the mapping
		out[n] = tt
	}
	return out
}

// writeTensors replaces dir's model.safetensors with tensors.
func writeTensors(t *testing.T, dir string, tensors map[string]safetensors.Tensor) {
	t.Helper()
	list := make([]safetensors.Tensor, 0, len(tensors))
	for name, tt := range tensors {
		tt.Name = name
		list = append(list, tt)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), list, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

// editTensors applies edit to dir's tensors and writes them back.
func editTensors(t *testing.T, dir string, edit func(ts map[string]safetensors.Tensor)) {
	t.Helper()
	ts := readTensors(t, dir)
	edit(ts)
	writeTensors(t, dir, ts)
}

// editConfig applies edit to dir's config.json (nested form: the text
// settings are under "text_config").
func editConfig(t *testing.T, dir string, edit func(top, text map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	edit(top, top["text_config"].(map[string]any))
	if raw, err = json.MarshalIndent(top, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadDir opens and loads dir on a CPU rank. The checkpoint is closed when
// the test ends.
func loadDir(t *testing.T, dir string) (*model.Checkpoint, model.Model, *cpu.Backend, error) {
	t.Helper()
	ck, err := model.Open(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	t.Cleanup(func() { ck.Close() })
	be := cpu.New(cpu.Options{})
	m, err := ck.Load(be, model.Single)
	return ck, m, be, err
}

// mustLoad loads dir on a CPU rank (loadDir) and returns the checkpoint and
// the logits of a short prompt (logitsOf).
func mustLoad(t *testing.T, dir string) (*model.Checkpoint, []float32) {
	t.Helper()
	ck, m, be, err := loadDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	return ck, logitsOf(t, be, m)
}

// logitsOf runs a short prompt through a fresh session.
func logitsOf(t *testing.T, be *cpu.Backend, m model.Model) []float32 {
	t.Helper()
	ids := []int32{1, 17, 200, 3, 99}
	logits, err := model.NewSession(be, m, len(ids)).Step(ids, true)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

const lm = "model.language_model."

// problems splits the audit error into its sorted list of problems.
func problems(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		t.Fatal("load succeeded, want an audit error")
	}
	_, list, ok := strings.Cut(err.Error(), "does not match Qwen3_5ForConditionalGeneration: ")
	if !ok {
		t.Fatalf("error %q is not an audit error", err)
	}
	return strings.Split(list, "; ")
}

// TestLoadAuditReportsEveryProblem: each mutation alone gives exactly its
// problems, and all of them together give all of them in one error.
func TestLoadAuditReportsEveryProblem(t *testing.T) {
	type mutation struct {
		name  string
		edit  func(ts map[string]safetensors.Tensor)
		wants []string
	}
	muts := []mutation{
		{"drop", func(ts map[string]safetensors.Tensor) {
			delete(ts, lm+"norm.weight")
		}, []string{"missing norm.weight"}},
		{"rename", func(ts map[string]safetensors.Tensor) {
			ts[lm+"layers.0.mlp.upp_proj.weight"] = ts[lm+"layers.0.mlp.up_proj.weight"]
			delete(ts, lm+"layers.0.mlp.up_proj.weight")
		}, []string{"missing layers.0.mlp.up_proj.weight", "unexpected " + lm + "layers.0.mlp.upp_proj.weight"}},
		{"reshape", func(ts map[string]safetensors.Tensor) {
			n := lm + "layers.3.self_attn.q_norm.weight" // [64] bf16
			tt := ts[n]
			tt.Shape, tt.Data = []int{32}, tt.Data[:32*2]
			ts[n] = tt
		}, []string{lm + "layers.3.self_attn.q_norm.weight has shape [32], want [64]"}},
		{"transpose", func(ts map[string]safetensors.Tensor) {
			n := lm + "layers.1.mlp.down_proj.weight" // [64, 192]: same size, wrong layout
			tt := ts[n]
			tt.Shape = []int{192, 64}
			ts[n] = tt
		}, []string{lm + "layers.1.mlp.down_proj.weight has shape [192 64], want [64 192]"}},
		{"add", func(ts map[string]safetensors.Tensor) {
			ts[lm+"layers.2.extra.weight"] = safetensors.Tensor{DType: safetensors.F32, Shape: []int{2}, Data: safetensors.EncodeF32([]float32{1, 2})}
		}, []string{"unexpected " + lm + "layers.2.extra.weight"}},
	}
	all := mutation{name: "all", edit: func(ts map[string]safetensors.Tensor) {
		for _, m := range muts {
			m.edit(ts)
		}
	}}
	for _, m := range muts {
		all.wants = append(all.wants, m.wants...)
	}
	for _, m := range append(muts, all) {
		t.Run(m.name, func(t *testing.T) {
			dir := tinyCheckpoint(t)
			editTensors(t, dir, m.edit)
			_, _, _, err := loadDir(t, dir)
			got := problems(t, err)
			want := slices.Sorted(slices.Values(m.wants))
			if !slices.Equal(got, want) {
				t.Errorf("problems:\n  got  %q\n  want %q", got, want)
			}
			if !strings.Contains(err.Error(), dir) {
				t.Errorf("error %q does not name the directory", err)
			}
		})
	}
}

// TestLoadIgnoresVisionAndMTP: vision-tower and MTP tensors are skipped,
// listed by Ignored and change nothing.
func TestLoadIgnoresVisionAndMTP(t *testing.T) {
	dir := tinyCheckpoint(t)
	_, want0 := mustLoad(t, dir)

	extra := []string{"model.visual.blocks.0.attn.qkv.weight", "mtp.fc.weight", "model.mtp.norm.weight", lm + "mtp.layers.0.weight"}
	editTensors(t, dir, func(ts map[string]safetensors.Tensor) {
		for _, n := range extra {
			ts[n] = safetensors.Tensor{DType: safetensors.BF16, Shape: []int{3, 5}, Data: safetensors.EncodeBF16(make([]float32, 15))}
		}
	})
	ck, logits := mustLoad(t, dir)
	if got, want := slices.Sorted(slices.Values(ck.Ignored())), slices.Sorted(slices.Values(extra)); !slices.Equal(got, want) {
		t.Errorf("Ignored() = %q, want %q", got, want)
	}
	if !slices.Equal(logits, want0) {
		t.Error("ignored tensors changed the logits")
	}
}

// TestLoadTying covers the three tying cases: lm_head.weight with
// tie_word_embeddings=false loads untied (and is used); lm_head.weight with a
// tied flag is ignored; no lm_head.weight means tied whatever the flag says.
func TestLoadTying(t *testing.T) {
	base := tinyCheckpoint(t)
	_, tied := mustLoad(t, base)
	// lm_head = 2·embed, exact in bf16, so untied logits are exactly 2× tied.
	addHead := func(t *testing.T, dir string) {
		editTensors(t, dir, func(ts map[string]safetensors.Tensor) {
			emb := ts[lm+"embed_tokens.weight"]
			vals, err := emb.Float32()
			if err != nil {
				t.Fatal(err)
			}
			for i := range vals {
				vals[i] *= 2
			}
			ts["lm_head.weight"] = safetensors.Tensor{DType: safetensors.BF16, Shape: emb.Shape, Data: safetensors.EncodeBF16(vals)}
		})
	}
	untie := func(t *testing.T, dir string) {
		editConfig(t, dir, func(top, text map[string]any) {
			top["tie_word_embeddings"], text["tie_word_embeddings"] = false, false
		})
	}

	t.Run("untied", func(t *testing.T) {
		dir := tinyCheckpoint(t)
		addHead(t, dir)
		untie(t, dir)
		ck, got := mustLoad(t, dir)
		if ck.Config.TieEmbeddings || len(ck.Ignored()) != 0 {
			t.Fatalf("TieEmbeddings = %v, Ignored = %q; want untied, nothing ignored", ck.Config.TieEmbeddings, ck.Ignored())
		}
		for i := range got {
			if got[i] != 2*tied[i] {
				t.Fatalf("logit %d = %g, want 2 × %g: lm_head.weight is not the output projection", i, got[i], tied[i])
			}
		}
	})
	t.Run("tied flag ignores lm_head", func(t *testing.T) {
		dir := tinyCheckpoint(t)
		addHead(t, dir)
		ck, got := mustLoad(t, dir)
		if !ck.Config.TieEmbeddings || !slices.Equal(ck.Ignored(), []string{"lm_head.weight"}) {
			t.Fatalf("TieEmbeddings = %v, Ignored = %q; want tied, lm_head.weight ignored", ck.Config.TieEmbeddings, ck.Ignored())
		}
		if !slices.Equal(got, tied) {
			t.Error("logits differ from the tied model")
		}
	})
	t.Run("untied flag without lm_head", func(t *testing.T) {
		dir := tinyCheckpoint(t)
		untie(t, dir)
		ck, _ := mustLoad(t, dir)
		if !ck.Config.TieEmbeddings {
			t.Error("a checkpoint without lm_head.weight loaded untied")
		}
	})
}

// TestOpenUnknownArchitecture: the registry's error names the architecture
// and what is supported.
func TestOpenUnknownArchitecture(t *testing.T) {
	dir := tinyCheckpoint(t)
	editConfig(t, dir, func(top, _ map[string]any) {
		top["architectures"] = []string{"LlamaForCausalLM"}
	})
	_, err := model.Open(dir)
	if err == nil {
		t.Fatal("opened a checkpoint of an unknown architecture")
	}
	for _, want := range []string{`unknown architecture "LlamaForCausalLM"`, "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}
