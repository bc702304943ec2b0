package tokenizer

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// withAddedTokens returns a tokenizer with the Synthetic base vocabulary and
// the given added_tokens list.
func withAddedTokens(t *testing.T, added []map[string]any) *Tokenizer {
	t.Helper()
	_, data := editedSynthetic(t, 50, func(m map[string]any) { m["added_tokens"] = added })
	tk, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// editedSynthetic returns the Synthetic tokenizer.json of n merges, and the
// same with edit applied to its JSON object.
func editedSynthetic(t *testing.T, n int, edit func(m map[string]any)) (orig, edited []byte) {
	t.Helper()
	orig, err := Synthetic(n, nil)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(orig, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if edited, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	return orig, edited
}

func tok(content string, opts ...string) map[string]any {
	m := map[string]any{"id": 0, "content": content, "single_word": false, "lstrip": false,
		"rstrip": false, "normalized": false, "special": false}
	for _, o := range opts {
		m[o] = true
	}
	return m
}

type seg struct {
	Text  string
	Added bool
}

func (s seg) String() string { return fmt.Sprintf("{%q %v}", s.Text, s.Added) }

func segs(tk *Tokenizer, s string) []seg {
	var out []seg
	for _, sg := range tk.addedSegments(s) {
		out = append(out, seg{sg.text, sg.id >= 0})
	}
	return out
}

// Cases adapted from HF tokenizers' added_vocabulary.rs tests.
func TestAddedTokenOptions(t *testing.T) {
	tk := withAddedTokens(t, []map[string]any{
		tok("my", "lstrip", "rstrip", "normalized"), tok("name", "normalized"), tok("ony", "single_word", "normalized"),
		tok("[CLS]", "special"), tok("[SEP]", "special"),
	})
	got := segs(tk, "[CLS] my name is anthony [SEP]")
	want := []seg{{"[CLS]", true}, {" my ", true}, {"name", true}, {" is anthony ", false}, {"[SEP]", true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}

	tk = withAddedTokens(t, []map[string]any{tok("<mask>", "single_word", "normalized")})
	got = segs(tk, "<mask>, <mask>- ◌̰<mask>")
	want = []seg{{"<mask>", true}, {", ", false}, {"<mask>", true}, {"- ◌̰<mask>", false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	got = segs(tk, "<mask> My name <mask> A<mask> <mask>ony <mask>")
	want = []seg{{"<mask>", true}, {" My name ", false}, {"<mask>", true}, {" A<mask> <mask>ony ", false}, {"<mask>", true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}

	tk = withAddedTokens(t, []map[string]any{tok("<mask>", "lstrip", "rstrip", "single_word", "normalized")})
	got = segs(tk, "Hi <mask> there\t<mask>\t<mask>\u2000")
	// NFC maps U+2000 EN QUAD to U+2002 EN SPACE (HF's test uses Lowercase).
	want = []seg{{"Hi", false}, {" <mask> ", true}, {"there", false}, {"\t<mask>\t", true}, {"<mask>\u2002", true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

func TestAddedTokenLongestAndNormalized(t *testing.T) {
	tk := withAddedTokens(t, []map[string]any{
		tok("<a>"), tok("<a><b>"), tok("café", "normalized"), tok("e\u0301x"),
	})
	got := segs(tk, "x<a><b><a>cafe\u0301 e\u0301x")
	// "café" matches the NFC-normalized text; "e\u0301x" is not normalized
	// and matches the raw text.
	want := []seg{{"x", false}, {"<a><b>", true}, {"<a>", true}, {"café", true}, {" ", false}, {"e\u0301x", true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

// Ids are assigned like HF: the vocabulary id when the content is known,
// otherwise the next id after the model vocabulary; the "id" field is ignored.
func TestAddedTokenIDs(t *testing.T) {
	x, y, a := tok("<x>", "special"), tok("<y>"), tok("a")
	x["id"], y["id"], a["id"] = 999, 5, 1234
	tk := withAddedTokens(t, []map[string]any{x, y, a})
	for content, want := range map[string]int32{"<x>": 306, "<y>": 307, "a": 'a'} {
		if got, ok := tk.TokenID(content); !ok || got != want {
			t.Errorf("TokenID(%q) = %d, want %d", content, got, want)
		}
	}
	if tk.VocabSize() != 308 {
		t.Errorf("VocabSize = %d", tk.VocabSize())
	}
	if !tk.IsSpecial(306) || tk.IsSpecial(307) || tk.IsSpecial('a') {
		t.Error("IsSpecial wrong")
	}
	if got := tk.Encode("<x>b<y>"); !reflect.DeepEqual(got, []int32{306, 'b' - 0, 307}) {
		// 'b' is byte token 98 == its id
		t.Errorf("Encode = %v", got)
	}
	if got := tk.Decode([]int32{306, 'b', 307}); got != "<x>b<y>" {
		t.Errorf("Decode = %q", got)
	}
}

func TestParseErrors(t *testing.T) {
	good, err := Synthetic(10, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := []string{
		``, `{`, `[]`, `{"version":"2.0"}`, `{}`,
		strings.Replace(string(good), `"NFC"`, `"Lowercase"`, 1),
		strings.Replace(string(good), `"Isolated"`, `"Removed"`, 1),
		strings.Replace(string(good), `\\s+(?!\\S)|\\s+`, `\\s+`, 1),
		strings.Replace(string(good), `"type": "BPE"`, `"type": "WordPiece"`, 1),
		strings.Replace(string(good), `"byte_fallback": false`, `"byte_fallback": true`, 1),
		strings.Replace(string(good), `["Ġ", "t"]`, `["Ġ", "nope"]`, 1),
	}
	for _, b := range bad {
		if _, err := Parse([]byte(b)); err == nil || !strings.HasPrefix(err.Error(), "tokenizer: ") {
			t.Errorf("Parse(%.60q...) err = %v", b, err)
		}
	}
}

func TestParseLegacyMerges(t *testing.T) {
	data, data2 := editedSynthetic(t, 100, func(m map[string]any) {
		model := m["model"].(map[string]any)
		var legacy []string
		for _, p := range model["merges"].([]any) {
			pair := p.([]any)
			legacy = append(legacy, pair[0].(string)+" "+pair[1].(string))
		}
		model["merges"] = legacy
	})
	a, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(data2)
	if err != nil {
		t.Fatal(err)
	}
	text := "The quick brown fox jumps over the lazy dog"
	if x, y := a.Encode(text), b.Encode(text); !reflect.DeepEqual(x, y) {
		t.Errorf("pair merges %v != legacy merges %v", x, y)
	}
}
