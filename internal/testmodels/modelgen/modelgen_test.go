package modelgen

import (
	"path/filepath"
	"slices"
	"testing"

	"cohort/model"
	"cohort/model/tokenizer"
)

// TestPresetTokenizersCoverVocab: every preset's tokenizer has exactly the
// model's vocabulary, so every id the model can emit decodes to text (the
// small preset once had 8,192 embedding rows and 1,259 tokens, and its
// generations printed nothing).
func TestPresetTokenizersCoverVocab(t *testing.T) {
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			p := Presets[name]
			_, tok, err := presetTokenizer(p)
			if err != nil {
				t.Fatal(err)
			}
			if tok.VocabSize() != p.Vocab {
				t.Fatalf("tokenizer has %d tokens, the model %d", tok.VocabSize(), p.Vocab)
			}
			for id := range int32(p.Vocab) {
				special := int(id) >= p.Vocab-len(Specials)
				if s, ok := tok.Token(id); !ok || s == "" {
					t.Fatalf("id %d has no token", id)
				}
				if special != tok.IsSpecial(id) {
					t.Fatalf("id %d: special %v, want %v", id, tok.IsSpecial(id), special)
				}
				if !special && tok.Decode([]int32{id}) == "" {
					t.Fatalf("id %d decodes to nothing", id)
				}
			}
			for i, s := range Specials {
				if id, ok := tok.TokenID(s); !ok || int(id) != p.Vocab-len(Specials)+i {
					t.Errorf("special %q has id %d (%v), want %d", s, id, ok, p.Vocab-len(Specials)+i)
				}
			}
		})
	}
}

// TestWriteTiny: a written checkpoint's config agrees with its tokenizer:
// the vocabulary size and the EOS ids (<|endoftext|> and <|im_end|>).
func TestWriteTiny(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if ck.Config.VocabSize != tok.VocabSize() {
		t.Errorf("config vocab %d, tokenizer %d", ck.Config.VocabSize, tok.VocabSize())
	}
	eos, _ := tok.TokenID("<|endoftext|>")
	imEnd, _ := tok.TokenID("<|im_end|>")
	if !slices.Contains(ck.Config.EOS, eos) || !slices.Contains(ck.Config.EOS, imEnd) {
		t.Errorf("config EOS %v, want %d and %d", ck.Config.EOS, eos, imEnd)
	}
}
