package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"cohort/model/tokenizer/tokenizertest"

	"golang.org/x/text/unicode/norm"
)

// qwen3Tok loads the real Qwen3 tokenizer from path, once per test binary
// (the path is the same on every call).
var qwen3Tok = onceTokenizer(Load)

// qwen3 is the real Qwen3 tokenizer.
func qwen3(t testing.TB) *Tokenizer {
	t.Helper()
	return qwen3Tok(t, tokenizertest.Qwen3Path(t))
}

// onceTokenizer makes load's tokenizer of src (a file, or a name for the
// errors) once and hands it to every test that asks; a load error fails
// each of them.
func onceTokenizer(load func(src string) (*Tokenizer, error)) func(t testing.TB, src string) *Tokenizer {
	var once sync.Once
	var tok *Tokenizer
	var err error
	return func(t testing.TB, src string) *Tokenizer {
		t.Helper()
		once.Do(func() { tok, err = load(src) })
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		return tok
	}
}

func readCorpus(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "corpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var corpus []string
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatalf("testdata/corpus.json: %v", err)
	}
	return corpus
}

func TestQwen3Dir(t *testing.T) {
	dir := tokenizertest.Qwen3Dir(t)
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestQwen3Known(t *testing.T) {
	tk := qwen3(t)
	if got := tk.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669", got)
	}
	cases := []struct {
		text string
		ids  []int32
	}{
		{"Hello world", []int32{9707, 1879}},
		{"<|im_start|>user\nhi<|im_end|>", []int32{151644, 872, 198, 6023, 151645}},
		{"<|endoftext|>", []int32{151643}},
		{"<think>\n\n</think>\n\n", []int32{151667, 271, 151668, 271}},
		{"", []int32{}},
	}
	for _, c := range cases {
		if got := tk.Encode(c.text); !reflect.DeepEqual(got, c.ids) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.ids)
		}
		if got := tk.Decode(c.ids); got != c.text {
			t.Errorf("Decode(%v) = %q, want %q", c.ids, got, c.text)
		}
	}
	for tok, want := range map[string]int32{"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<think>": 151667, "</think>": 151668, "Hello": 9707, "Ġworld": 1879, "!": 0} {
		if id, ok := tk.TokenID(tok); !ok || id != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", tok, id, ok, want)
		}
		if got, ok := tk.Token(want); !ok || got != tok {
			t.Errorf("Token(%d) = %q, %v; want %q", want, got, ok, tok)
		}
	}
	for id, want := range map[int32]bool{151643: true, 151645: true, 151656: true, 151657: false, 151667: false, 9707: false, -1: false, 999999: false} {
		if got := tk.IsSpecial(id); got != want {
			t.Errorf("IsSpecial(%d) = %v, want %v", id, got, want)
		}
	}
	if _, ok := tk.Token(151669); ok {
		t.Error("Token(151669) exists")
	}
	if got := tk.Decode([]int32{-5, 9707, 151669, 1879, 1 << 30}); got != "Hello world" {
		t.Errorf("Decode with unknown ids = %q", got)
	}
}

// Every corpus string round-trips to its NFC form and streams identically.
func TestQwen3CorpusRoundTrip(t *testing.T) {
	tk := qwen3(t)
	corpus := readCorpus(t)
	if len(corpus) < 320 {
		t.Fatalf("corpus has %d strings, want >= 320", len(corpus))
	}
	for _, s := range corpus {
		if !utf8.ValidString(s) {
			t.Fatalf("corpus string %q is not valid UTF-8", s)
		}
		ids := tk.Encode(s)
		if got, want := tk.Decode(ids), norm.NFC.String(s); got != want {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
		checkStream(t, tk, ids)
	}
}

// Invalid UTF-8 is treated like Rust's from_utf8_lossy before encoding.
func TestQwen3InvalidUTF8(t *testing.T) {
	tk := qwen3(t)
	for in, want := range map[string]string{
		"\xff":             "\uFFFD",
		"a\xe4\xb8b":       "a\uFFFDb",
		"\xed\xa0\x80x":    "\uFFFD\uFFFD\uFFFDx",
		"<|im_end|>\xc0\n": "<|im_end|>\uFFFD\n",
	} {
		ids := tk.Encode(in)
		if !reflect.DeepEqual(ids, tk.Encode(want)) {
			t.Errorf("Encode(%q) = %v, want Encode(%q) = %v", in, ids, want, tk.Encode(want))
		}
		if got := tk.Decode(ids); got != want {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", in, got, want)
		}
	}
}

type goldenFile struct {
	TokenizersVersion string `json:"tokenizers_version"`
	TokenizerSHA256   string `json:"tokenizer_sha256"`
	Cases             []struct {
		Text    string  `json:"text"`
		IDs     []int32 `json:"ids"`
		Decoded string  `json:"decoded"`
	} `json:"cases"`
}

// TestQwen3Golden compares against ids produced by HF tokenizers
// (testdata/golden.json, written by tools/hfref/tokref.py). The env var
// COHORT_TOKENIZER_GOLDEN may point at another golden file.
func TestQwen3Golden(t *testing.T) {
	path := os.Getenv("COHORT_TOKENIZER_GOLDEN")
	if path == "" {
		path = filepath.Join("testdata", "golden.json")
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Fatal("model/tokenizer/testdata/golden.json is missing; generate it on a machine with the HF " +
			"`tokenizers` Python package: python3 tools/hfref/tokref.py --tokenizer <Qwen3 tokenizer.json> " +
			"--corpus model/tokenizer/testdata/corpus.json --out model/tokenizer/testdata/golden.json")
	}
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	corpus := readCorpus(t)
	if len(g.Cases) != len(corpus) {
		t.Fatalf("%s has %d cases but corpus.json has %d strings: regenerate it with tools/hfref/tokref.py", path, len(g.Cases), len(corpus))
	}
	tk := qwen3(t)
	t.Logf("golden from tokenizers %s", g.TokenizersVersion)
	if g.TokenizerSHA256 != "" {
		data, err := os.ReadFile(tokenizertest.Qwen3Path(t))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != g.TokenizerSHA256 {
			t.Fatalf("%s was generated from a tokenizer.json with sha256 %s, but the test uses %s", path, g.TokenizerSHA256, hex.EncodeToString(sum[:]))
		}
	}
	failed := 0
	for i, c := range g.Cases {
		if c.Text != corpus[i] {
			t.Fatalf("case %d text %q != corpus %q: regenerate golden.json", i, c.Text, corpus[i])
		}
		ids := tk.Encode(c.Text)
		if !reflect.DeepEqual(ids, c.IDs) && !(len(ids) == 0 && len(c.IDs) == 0) {
			failed++
			t.Errorf("case %d: Encode(%q)\n got  %v %q\n want %v %q", i, c.Text, ids, tokenStrings(tk, ids), c.IDs, tokenStrings(tk, c.IDs))
		}
		if got := tk.Decode(c.IDs); got != c.Decoded {
			failed++
			t.Errorf("case %d: Decode(%v) = %q, want %q", i, c.IDs, got, c.Decoded)
		}
		if failed > 20 {
			t.Fatal("too many failures")
		}
	}
}

func tokenStrings(tk *Tokenizer, ids []int32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i], _ = tk.Token(id)
	}
	return out
}

func TestQwen3Concurrent(t *testing.T) {
	tk := qwen3(t)
	corpus := readCorpus(t)
	want := make([][]int32, len(corpus))
	for i, s := range corpus {
		want[i] = tk.Encode(s)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := range corpus {
				i := (k*7 + g*31) % len(corpus)
				if got := tk.Encode(corpus[i]); !reflect.DeepEqual(got, want[i]) {
					t.Errorf("concurrent Encode(%q) differs", corpus[i])
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func BenchmarkQwen3Encode(b *testing.B) {
	tk := qwen3(b)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. 你好，世界！ func main() {}\n", 20)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tk.Encode(text)
	}
}
