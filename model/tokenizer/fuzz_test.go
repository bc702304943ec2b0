package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Hello world", "DON'T they'Re", "  \n\t x \r\n", "中文 😀👍🏽 e\u0301",
		"<|im_start|>user\nhi<|im_end|>", "\xff\xe4\xb8", "123 4.5", "\u3000\u00a0\u2028"} {
		f.Add(s)
	}
	tk := synthetic(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s)
		for _, id := range ids {
			if id < 0 || int(id) >= tk.VocabSize() {
				t.Fatalf("Encode(%q) produced id %d", s, id)
			}
		}
		got := tk.Decode(ids)
		if !utf8.ValidString(got) {
			t.Fatalf("Decode produced invalid UTF-8 %q", got)
		}
		valid := toValidUTF8(s)
		hasSpecial := false
		for _, sp := range syntheticSpecials {
			hasSpecial = hasSpecial || strings.Contains(valid, sp)
		}
		if !hasSpecial {
			if want := norm.NFC.String(valid); got != want {
				t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
			}
		}
		checkStream(t, tk, ids)
	})
}

func FuzzParse(f *testing.F) {
	good, err := Synthetic(20, []string{"<s>"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"model":{"vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]],"unk_token":"a","fuse_unk":true},"added_tokens":[{"id":3,"content":"<x>","lstrip":true,"rstrip":true,"single_word":true}]}`))
	f.Add([]byte(`{"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},"decoder":{"type":"ByteLevel"},"model":{"vocab":{"Ġ":0},"merges":[]}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":16000000},"merges":null}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"added_tokens":[{"content":""}],"model":{"vocab":{}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := Parse(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tokenizer: ") {
				t.Fatalf("error without prefix: %v", err)
			}
			return
		}
		for _, s := range []string{"", "ab ab", "<x> a\nb", "<s>héllo 12"} {
			ids := tk.Encode(s)
			_ = tk.Decode(ids)
			checkStream(t, tk, ids)
		}
		_ = tk.VocabSize()
	})
}
