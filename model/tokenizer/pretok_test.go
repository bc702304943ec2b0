package tokenizer

import (
	"reflect"
	"strings"
	"testing"
)

func pieces(sp splitter, s string) []string {
	var out []string
	for _, r := range sp(s, nil) {
		out = append(out, s[r[0]:r[1]])
	}
	return out
}

// split is an input and the pieces it splits into.
type split struct {
	in   string
	want []string
}

// checkSplits checks the pieces sp cuts each case's input into.
func checkSplits(t *testing.T, sp splitter, cases []split) {
	t.Helper()
	for _, c := range cases {
		if got := pieces(sp, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("split(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Expected splits are derived by hand from the regex's leftmost-first,
// backtracking semantics (see the comments in pretok.go).
func TestQwenSplit(t *testing.T) {
	checkSplits(t, qwenSplitter(1), []split{
		{"Hello world", []string{"Hello", " world"}},
		{"   x", []string{"  ", " x"}},
		{"x   ", []string{"x", "   "}},
		{"   ", []string{"   "}},
		{"a  \n  b", []string{"a", "  \n", " ", " b"}},
		{"x  \n\n  y", []string{"x", "  \n\n", " ", " y"}},
		{"a\r\nb", []string{"a", "\r\n", "b"}},
		{"a \r\n b", []string{"a", " \r\n", " b"}},
		{"\r\n\r\n", []string{"\r\n\r\n"}},
		{"ab\r", []string{"ab", "\r"}},
		{"\n\nhello", []string{"\n\n", "hello"}},
		{" \n", []string{" \n"}},
		{"\n ", []string{"\n", " "}},
		{"a\n\n \n b", []string{"a", "\n\n \n", " b"}},
		{"x\t!", []string{"x", "\t", "!"}},
		{"foo   !", []string{"foo", "  ", " !"}},
		{"hello !!!\n\nworld", []string{"hello", " !!!\n\n", "world"}},
		{"hello!!!", []string{"hello", "!!!"}},
		{"a\u00a0b", []string{"a", "\u00a0b"}},
		{"\u3000\u3000x", []string{"\u3000", "\u3000x"}},
		{"中文\u3000空格", []string{"中文", "\u3000空格"}},
		{"x\u2028y", []string{"x", "\u2028y"}},
		{"x\u0085y", []string{"x", "\u0085y"}},
		{"x \u2029", []string{"x", " \u2029"}},
		{"a\u200bb", []string{"a", "\u200bb"}}, // U+200B is Cf, not whitespace
		// Contractions: case-insensitive, and they win over longer letters.
		{"DON'T", []string{"DON", "'T"}},
		{"they'Re", []string{"they", "'Re"}},
		{"we'LL'Ve'm'D", []string{"we", "'LL", "'Ve", "'m", "'D"}},
		{"'steve", []string{"'s", "teve"}},
		{"it'ſ", []string{"it", "'ſ"}}, // U+017F folds to s
		{"'hello", []string{"'hello"}},
		{"''s", []string{"''", "s"}},
		{"'S'T", []string{"'S", "'T"}},
		{"x'Ss", []string{"x", "'S", "s"}},
		{"don 't", []string{"don", " '", "t"}},
		{"isn’t", []string{"isn", "’t"}},
		{"'", []string{"'"}},
		{"'l", []string{"'l"}},
		{"'ll", []string{"'ll"}},
		{"'rx", []string{"'rx"}},
		// Numbers are single characters.
		{"123", []string{"1", "2", "3"}},
		{"abc123", []string{"abc", "1", "2", "3"}},
		{" 123", []string{" ", "1", "2", "3"}},
		{"1st", []string{"1", "st"}},
		{"$19.99", []string{"$", "1", "9", ".", "9", "9"}},
		{"Ⅻ½", []string{"Ⅻ", "½"}},
		// Marks are neither letters nor numbers.
		{"e\u0301", []string{"e", "\u0301"}},
		{"हिन्दी", []string{"ह", "िन", "्द", "ी"}},
		{"ラーメン", []string{"ラーメン"}},
		// Symbols may prefix letters.
		{"😀😀 hi", []string{"😀😀", " hi"}},
		{"👍🏽", []string{"👍🏽"}},
		{"hi😀there", []string{"hi", "😀there"}},
		{"a,b", []string{"a", ",b"}},
		{"(a)[b]", []string{"(a", ")[", "b", "]"}},
		{"<|im_end|>", []string{"<|", "im", "_end", "|>"}},
		{"", nil},
	})
}

func TestLlama3Split(t *testing.T) {
	got := pieces(qwenSplitter(3), "1234567 a12")
	want := []string{"123", "456", "7", " a", "12"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestGPT2Split(t *testing.T) {
	checkSplits(t, gpt2Split, []split{
		{"Hello world", []string{"Hello", " world"}},
		{"   x", []string{"  ", " x"}},
		{"123 456", []string{"123", " 456"}},
		{"DON'T don't", []string{"DON", "'", "T", " don", "'t"}},
		{"a\n\nb", []string{"a", "\n", "\n", "b"}},
		{"x  ", []string{"x", "  "}},
		{"a!! ??", []string{"a", "!!", " ??"}},
	})
}

// The pieces always tile the input.
func TestSplitTiles(t *testing.T) {
	inputs := []string{"", " ", "a b  c\t\n\r\n x", strings.Repeat(" \u3000\n", 20), "é😀'S 12.5"}
	for _, sp := range []splitter{qwenSplitter(1), qwenSplitter(3), gpt2Split} {
		for _, in := range inputs {
			var b strings.Builder
			for _, p := range pieces(sp, in) {
				if p == "" {
					t.Fatalf("empty piece for %q", in)
				}
				b.WriteString(p)
			}
			if b.String() != in {
				t.Fatalf("pieces of %q join to %q", in, b.String())
			}
		}
	}
}
