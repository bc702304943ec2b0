package grammar

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"cohort/internal/testmodels/modelgen"
	"cohort/model/tokenizer"
	"cohort/model/tokenizer/tokenizertest"
)

// benchSchemas are the shapes the mask benchmark walks: an API payload,
// a free-form object, and an array of records with formats.
var benchSchemas = []string{
	`{"type":"object","properties":{"name":{"type":"string","maxLength":40},"email":{"type":"string","format":"email"},
	 "age":{"type":"integer","minimum":0,"maximum":120},"role":{"enum":["admin","user","guest"]},
	 "tags":{"type":"array","items":{"type":"string"},"maxItems":5}},"required":["name","email","age","role","tags"],"additionalProperties":false}`,
	`{"type":"object"}`,
	`{"type":"array","items":{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"when":{"type":"string","format":"date-time"},
	 "amount":{"type":"number","minimum":0,"maximum":10000},"note":{"anyOf":[{"type":"string"},{"type":"null"}]}},
	 "required":["id","when","amount","note"]},"minItems":1,"maxItems":4}`,
}

func tokenizerVocab(b *testing.B, tok *tokenizer.Tokenizer) *Vocab {
	var stops []int32
	if id, ok := tok.TokenID("<|im_end|>"); ok {
		stops = append(stops, id)
	}
	start := time.Now()
	v, err := NewVocab(tok.VocabSize(), tok.TokenBytes, stops)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "vocab-build-ms")
	return v
}

// BenchmarkMask is the CPU time of one row's mask per token, for the real
// Qwen3 tokenizer (151k) and a 248k vocabulary of the Qwen3.5 shape,
// walking each schema with three seeds at up to 200 tokens, choosing
// uniformly among the allowed tokens (a random-weight model at
// temperature 1). The automaton is shared across seeds, as requests with
// one schema share it; the first walk of each schema pays for its states.
func BenchmarkMask(b *testing.B) {
	vocabs := []struct {
		name string
		tok  func(b *testing.B) *tokenizer.Tokenizer
	}{
		{"qwen3-151k", func(b *testing.B) *tokenizer.Tokenizer {
			tok, err := tokenizer.Load(tokenizertest.Qwen3Path(b))
			if err != nil {
				b.Fatal(err)
			}
			return tok
		}},
		{"vocab-248k", func(b *testing.B) *tokenizer.Tokenizer {
			p := modelgen.Presets["4b-shape"]
			data, err := tokenizer.Synthetic(p.Merges(), modelgen.Specials)
			if err != nil {
				b.Fatal(err)
			}
			tok, err := tokenizer.Parse(data)
			if err != nil {
				b.Fatal(err)
			}
			return tok
		}},
	}
	for _, vc := range vocabs {
		b.Run(vc.name, func(b *testing.B) {
			v := tokenizerVocab(b, vc.tok(b))
			var times []time.Duration
			for range b.N {
				for _, s := range benchSchemas {
					g, err := JSONSchema([]byte(s), v)
					if err != nil {
						b.Fatal(err)
					}
					for seed := range uint64(3) {
						times = append(times, walkTimes(b, g, v, seed, 200)...)
					}
				}
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "median-us/token")
			b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds())/1e3, "p99-us/token")
			b.ReportMetric(float64(len(times))/float64(b.N), "tokens")
		})
	}
}

// walkTimes generates up to budget tokens through g and returns the time
// of each step's mask.
func walkTimes(b *testing.B, g *Grammar, v *Vocab, seed uint64, budget int) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := g.NewMatcher()
	var out []time.Duration
	allowed := make([]int32, 0, v.Size())
	for step := 0; step < budget && !m.Done(); step++ {
		start := time.Now()
		mask, err := m.Mask(budget - step)
		out = append(out, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		allowed = allowed[:0]
		for id := range int32(v.Size()) {
			if mask.Has(id) {
				allowed = append(allowed, id)
			}
		}
		if len(allowed) == 0 {
			b.Fatal("empty mask")
		}
		if err := m.Accept(allowed[rng.IntN(len(allowed))]); err != nil {
			b.Fatal(err)
		}
	}
	if !m.Accepting() {
		b.Fatal("the walk did not complete")
	}
	return out
}
