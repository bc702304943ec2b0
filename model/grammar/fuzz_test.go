package grammar

import "testing"

// The compilers take text from requests: they must never panic or hang,
// and a grammar they return must match the inputs it was built from.

func FuzzJSONSchema(f *testing.F) {
	for _, s := range []string{`{"type":"string","pattern":"^a+$"}`, `{"type":"object","properties":{"a":{"$ref":"#"}}}`,
		`{"enum":[1,"x",null]}`, `{"type":"array","prefixItems":[{"type":"integer","minimum":-3}],"maxItems":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := JSONSchema([]byte(s), nil)
		if err == nil && g.MinLen() < 0 {
			t.Fatal("negative MinLen")
		}
	})
}

func FuzzRegex(f *testing.F) {
	for _, s := range []string{`a|b`, `[^a-z]{2,3}`, `(?:x\d)+`, `\u00e9.`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		Regex(s, nil)
	})
}

func FuzzEBNF(f *testing.F) {
	for _, s := range []string{"root ::= \"a\" b\nb ::= [0-9]+", `root ::= ("x" | "y"){2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		EBNF(s, nil)
	})
}
