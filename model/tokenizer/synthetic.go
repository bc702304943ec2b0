package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"golang.org/x/text/unicode/norm"
)

// syntheticSample is the fixed text Synthetic learns its merges from.
const syntheticSample = `The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.
It is a truth universally acknowledged, that a single man in possession of a good fortune,
must be in want of a wife. However little known the feelings or views of such a man may be
on his first entering a neighbourhood, this truth is so well fixed in the minds of the
surrounding families, that he is considered the rightful property of some one or other of
their daughters. I don't think they're going; we'll see what you've got. She'd said it's fine.
Hello world! Hello, world. How are you today? I'm fine, thanks. What time is it? It's 10:30.
The numbers are 1, 2, 3, 42, 100, 2024 and 3.14159. Call 555-0100 or email info@example.com.
Visit https://example.com/path?query=value&other=1 for more information about the project.

The model reads tokens, computes attention over the context, and predicts the next token.
Training data includes books, articles, source code, and conversations in many languages.
A tokenizer splits text into pieces; byte-level BPE never fails on unknown characters.

package main

import (
	"fmt"
	"strings"
)

// Greet returns a greeting for name.
func Greet(name string) string {
	if name == "" {
		return "Hello, world!"
	}
	return fmt.Sprintf("Hello, %s!", strings.TrimSpace(name))
}

func main() {
	for i := 0; i < 10; i++ {
		fmt.Println(Greet("user"), i)
	}
}

def fibonacci(n):
    """Return the first n Fibonacci numbers."""
    result = []
    a, b = 0, 1
    for _ in range(n):
        result.append(a)
        a, b = b, a + b
    return result


if __name__ == "__main__":
    print(fibonacci(10))

{"model": "cohort", "messages": [{"role": "user", "content": "Hello!"}], "stream": true}
<html><body><p class="note">Hello &amp; welcome</p></body></html>
SELECT name, count(*) FROM users WHERE active = 1 GROUP BY name ORDER BY name;

Le renard brun saute par-dessus le chien paresseux. Der schnelle braune Fuchs springt.
El zorro marrón rápido salta sobre el perro perezoso. Быстрая бурая лиса прыгает.
你好，世界！今天天气很好。こんにちは、世界。안녕하세요 세계. 🙂👍 café naïve résumé
`

// Synthetic builds a small, valid byte-level BPE tokenizer.json: ids 0..255
// are the 256 byte tokens (id == byte value), followed by nMerges merge
// tokens learned greedily (most frequent pair, ties broken by the smaller
// pair of ids) from a fixed built-in sample text pre-tokenized like Qwen,
// followed by the given special tokens (ids 256+nMerges...). Every merge
// creates a new token; if the sample is exhausted before nMerges merges are
// learned, the remaining merges append a printable ASCII character to
// existing tokens in a fixed order, so the vocabulary always has exactly
// 256+nMerges+len(specials) entries. The normalizer, pre-tokenizer and
// decoder are those of Qwen3. The output bytes are deterministic.
func Synthetic(nMerges int, specials []string) ([]byte, error) {
	if nMerges < 0 {
		return nil, fmt.Errorf("tokenizer: negative merge count %d", nMerges)
	}
	if nMerges > 1<<20 {
		return nil, fmt.Errorf("tokenizer: too many merges %d", nMerges)
	}
	toks := make([]string, 256, 256+nMerges+len(specials))
	vocab := make(map[string]int32, cap(toks))
	for b := 0; b < 256; b++ {
		toks[b] = string(byteToRune[b])
		vocab[toks[b]] = int32(b)
	}

	// Unique pre-tokens of the sample with their counts, in first-seen order.
	sample := norm.NFC.String(syntheticSample)
	var words [][]int32
	var freqs []int
	index := map[string]int{}
	for _, r := range qwenSplitter(1)(sample, nil) {
		w := sample[r[0]:r[1]]
		if i, ok := index[w]; ok {
			freqs[i]++
			continue
		}
		index[w] = len(words)
		ids := make([]int32, len(w))
		for k := 0; k < len(w); k++ {
			ids[k] = int32(w[k])
		}
		words = append(words, ids)
		freqs = append(freqs, 1)
	}

	merges := make([][2]string, 0, nMerges)
	seen := map[uint64]bool{}
	// usable reports whether merging (a, b) creates a new token.
	usable := func(a, b int32) bool {
		if seen[pairKey(a, b)] {
			return false
		}
		_, exists := vocab[toks[a]+toks[b]]
		return !exists
	}
	addMerge := func(a, b int32) int32 {
		seen[pairKey(a, b)] = true
		s := toks[a] + toks[b]
		merges = append(merges, [2]string{toks[a], toks[b]})
		id := int32(len(toks))
		toks = append(toks, s)
		vocab[s] = id
		return id
	}
	for len(merges) < nMerges {
		counts := map[uint64]int{}
		for i, w := range words {
			for k := 0; k+1 < len(w); k++ {
				counts[pairKey(w[k], w[k+1])] += freqs[i]
			}
		}
		best, bestN := uint64(0), 0
		for k, n := range counts {
			if n > bestN || (n == bestN && k < best) {
				if usable(int32(k>>32), int32(uint32(k))) {
					best, bestN = k, n
				}
			}
		}
		if bestN == 0 {
			break
		}
		a, b := int32(best>>32), int32(uint32(best))
		id := addMerge(a, b)
		for i, w := range words {
			out := w[:0]
			for k := 0; k < len(w); k++ {
				if k+1 < len(w) && w[k] == a && w[k+1] == b {
					out = append(out, id)
					k++
				} else {
					out = append(out, w[k])
				}
			}
			words[i] = out
		}
	}
	// Sample exhausted: append a printable ASCII byte to the printable ASCII
	// bytes, then to the learned tokens, then to these new tokens, in id
	// order. The new tokens stay short (a 248k vocabulary is a few MB of
	// JSON) and every one decodes to visible text.
	const first, last = '!', '~'
	for a := int32(first); len(merges) < nMerges; a++ {
		if a == last+1 {
			a = 256 // skip the bytes after '~'
		}
		if a >= int32(len(toks)) {
			return nil, fmt.Errorf("tokenizer: cannot make %d merges", nMerges)
		}
		for b := int32(first); b <= last && len(merges) < nMerges; b++ {
			if usable(a, b) {
				addMerge(a, b)
			}
		}
	}

	type added struct {
		id      int32
		content string
	}
	var adds []added
	for _, s := range specials {
		if s == "" {
			return nil, fmt.Errorf("tokenizer: empty special token")
		}
		if _, ok := vocab[s]; ok {
			return nil, fmt.Errorf("tokenizer: special token %q duplicates another token", s)
		}
		id := int32(len(toks))
		toks = append(toks, s)
		vocab[s] = id
		adds = append(adds, added{id, s})
	}

	var buf bytes.Buffer
	str := func(s string) {
		var e bytes.Buffer
		enc := json.NewEncoder(&e)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s) // strings always encode
		buf.Write(bytes.TrimSuffix(e.Bytes(), []byte("\n")))
	}
	buf.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, a := range adds {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n    {\"id\": ")
		buf.WriteString(strconv.Itoa(int(a.id)))
		buf.WriteString(", \"content\": ")
		str(a.content)
		buf.WriteString(", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}")
	}
	if len(adds) > 0 {
		buf.WriteString("\n  ")
	}
	buf.WriteString("],\n  \"normalizer\": {\"type\": \"NFC\"},\n")
	buf.WriteString("  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": ")
	str(qwenPattern)
	buf.WriteString("}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}]},\n")
	buf.WriteString("  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false},\n")
	buf.WriteString("  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false},\n")
	buf.WriteString("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": \"\",\n    \"end_of_word_suffix\": \"\",\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {")
	for id := 0; id < 256+nMerges; id++ {
		if id > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n      ")
		str(toks[id])
		buf.WriteString(": ")
		buf.WriteString(strconv.Itoa(id))
	}
	buf.WriteString("\n    },\n    \"merges\": [")
	for i, m := range merges {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n      [")
		str(m[0])
		buf.WriteString(", ")
		str(m[1])
		buf.WriteByte(']')
	}
	if len(merges) > 0 {
		buf.WriteString("\n    ")
	}
	buf.WriteString("]\n  }\n}\n")
	return buf.Bytes(), nil
}
