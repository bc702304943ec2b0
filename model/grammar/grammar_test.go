package grammar

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

func TestSchemaMatches(t *testing.T) {
	tests := []struct {
		schema string
		good   []string
		bad    []string
	}{
		{`{"type":"string"}`, []string{`""`, `"abc"`, `"a\"b"`, `"é"`, `"\u0001"`}, []string{`"`, `abc`, `"a"b"`, "\"\x01\""}},
		{`{"type":"integer","minimum":-5,"maximum":12}`, []string{`-5`, `0`, `9`, `12`, `-1`}, []string{`-6`, `13`, `-0`, `01`, `1.5`}},
		{`{"type":"number","minimum":0,"maximum":3}`, []string{`0`, `3`, `1.5`, `2.999999`}, []string{`3.5`, `-1`, `0.5`}},
		{`{"enum":["a",1,null,{"k":[true]}]}`, []string{`"a"`, `1`, `null`, `{"k":[true]}`}, []string{`"b"`, `2`}},
		{`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"}},"required":["b"]}`,
			[]string{`{"b":true}`, `{"a":1,"b":false}`, `{"a": 1, "b": false}`}, []string{`{}`, `{"a":1}`, `{"b":true,"a":1}`}},
		{`{"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":1,"maxItems":3}`,
			[]string{`[1]`, `[1,2,3]`, `[0, 9]`}, []string{`[]`, `[1,2,3,4]`, `[10]`}},
		{`{"type":"string","pattern":"^[a-z]{2}\\d+$"}`, []string{`"ab1"`, `"zz123"`}, []string{`"a1"`, `"ab"`, `"AB1"`}},
		{`{"type":"string","pattern":"x"}`, []string{`"x"`, `"axb"`}, []string{`"ab"`}},
		{`{"type":"string","minLength":2,"maxLength":3}`, []string{`"ab"`, `"abc"`, `"éé"`}, []string{`"a"`, `"abcd"`}},
		{`{"type":"string","format":"date"}`, []string{`"2024-02-28"`}, []string{`"2024-13-01"`, `"2024-02-30"`}},
		{`{"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/n"}},"required":["v"]}},"$ref":"#/$defs/n"}`,
			[]string{`{"v":1}`, `{"v":1,"next":{"v":2}}`}, []string{`{"next":{"v":2}}`}},
		{`{"anyOf":[{"type":"string"},{"type":"null"}]}`, []string{`"a"`, `null`}, []string{`1`}},
		{`{"type":"object"}`, []string{`{}`, `{"a":1}`, `{"a":[1,{"b":null}],"c":"d"}`}, []string{`[]`, `{"a"}`}},
		{`{"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}`, []string{`[]`, `["a"]`, `["a",1]`}, []string{`["a",1,2]`, `[1]`}},
	}
	for _, tt := range tests {
		g, err := JSONSchema([]byte(tt.schema), nil)
		if err != nil {
			t.Errorf("%s: %v", tt.schema, err)
			continue
		}
		for _, s := range tt.good {
			if !g.Matches(s) {
				t.Errorf("%s: %s should match", tt.schema, s)
			}
		}
		for _, s := range tt.bad {
			if g.Matches(s) {
				t.Errorf("%s: %s should not match", tt.schema, s)
			}
		}
	}
}

// byteVocab is every single byte plus a few longer tokens, and stop id 0.
func byteVocab(t testing.TB, extra ...string) *Vocab {
	toks := [][]byte{nil}
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	for _, e := range extra {
		toks = append(toks, []byte(e))
	}
	v, err := NewVocab(len(toks), func(id int32) ([]byte, bool) { return toks[id], toks[id] != nil }, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRandomWalkEndsValid(t *testing.T) {
	v := byteVocab(t, `{"`, `":`, `",`, `"}`, `abc`, `123`, `true`, `null`, `, "`, `"name`, `é`, "\u4e16\u754c")
	schemas := []string{
		`{"type":"object"}`,
		`{"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},"n":{"type":"number"}},"required":["name","tags","n"]}`,
		`{"type":"string","format":"email"}`,
		`{"type":"array","items":{"type":"object","properties":{"x":{"type":"integer","minimum":10,"maximum":20}},"required":["x"]},"minItems":2}`,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range schemas {
		g, err := JSONSchema([]byte(s), v)
		if err != nil {
			t.Fatal(err)
		}
		for trial := range 20 {
			m := g.NewMatcher()
			budget := 40 + trial*5
			var out []byte
			for step := 0; step < budget && !m.Done(); step++ {
				mask, err := m.Mask(budget - step)
				if err != nil {
					t.Fatal(err)
				}
				var allowed []int32
				for id := range int32(v.Size()) {
					if mask.Has(id) {
						allowed = append(allowed, id)
					}
				}
				if len(allowed) == 0 {
					t.Fatalf("%s: empty mask after %q", s, out)
				}
				tok := allowed[rng.IntN(len(allowed))]
				if err := m.Accept(tok); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
				if tok == 0 {
					break
				}
				out = append(out, v.bytes(tok)...)
			}
			if !m.Accepting() {
				t.Fatalf("%s: budget %d ended with %q, not complete", s, budget, out)
			}
			if !json.Valid(out) {
				t.Fatalf("%s: %q is not JSON", s, out)
			}
		}
	}
}

func TestTextGrammars(t *testing.T) {
	re, err := Regex(`(yes|no)-\d{2}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	dollar, err := Regex(`a\$`, nil) // an escaped $ is a literal, not an anchor
	if err != nil {
		t.Fatal(err)
	}
	backslash, err := Regex(`^a\\$`, nil) // an escaped backslash, then the anchor
	if err != nil {
		t.Fatal(err)
	}
	ch, err := Choice([]string{"red", "green", "blue"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := EBNF(`# a list of small sums
root ::= expr ("," expr)*
expr ::= num ("+" num)*
num  ::= [0-9]{1,3}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		g    *Grammar
		good []string
		bad  []string
	}{
		{re, []string{"yes-12", "no-00"}, []string{"yes-1", "maybe-12", "yes-123", " yes-12"}},
		{dollar, []string{"a$"}, []string{"a$b", "a"}},
		{backslash, []string{`a\`}, []string{`a`, `a\$`}},
		{ch, []string{"red", "blue"}, []string{"re", "redd", "Red"}},
		{eb, []string{"1", "1+22,333", "0+0+0"}, []string{"", "1+", "1234", "1,,2"}},
	}
	for i, tt := range tests {
		for _, s := range tt.good {
			if !tt.g.Matches(s) {
				t.Errorf("%d: %q should match", i, s)
			}
		}
		for _, s := range tt.bad {
			if tt.g.Matches(s) {
				t.Errorf("%d: %q should not match", i, s)
			}
		}
	}
	for _, bad := range []string{`root ::= x`, `expr ::= "a"`, `root ::= root "a"`, `root ::= "a" | (`, `root ::= "a"` + "\nroot ::= \"b\""} {
		if _, err := EBNF(bad, nil); err == nil {
			t.Errorf("EBNF(%q) succeeded", bad)
		}
	}
}

func TestQwenToolCalls(t *testing.T) {
	tools := []Tool{
		{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7},"unit":{"enum":["c","f"]}},"required":["city"]}`)},
		{Name: "ping"},
	}
	req, err := QwenToolCalls(tools, "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	named, err := QwenToolCalls(tools, "get_weather", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	call := "get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
	for _, s := range []string{call, "ping>\n</function>\n</tool_call>", call + "\n<tool_call>\n<function=ping>\n</function>\n</tool_call>"} {
		if !req.Matches(s) {
			t.Errorf("required: %q should match", s)
		}
	}
	for _, s := range []string{"get_weather>\n</function>\n</tool_call>", "nope>\n</function>\n</tool_call>",
		"get_weather>\n<parameter=city>\na<b\n</parameter>\n</function>\n</tool_call>",
		"get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n9\n</parameter>\n</function>\n</tool_call>"} {
		if req.Matches(s) {
			t.Errorf("required: %q should not match", s)
		}
	}
	// Two tools whose local $defs share a name resolve each in its own schema.
	refs, err := QwenToolCalls([]Tool{
		{Name: "a", Parameters: []byte(`{"type":"object","properties":{"x":{"$ref":"#/$defs/v"}},"required":["x"],"$defs":{"v":{"type":"integer"}}}`)},
		{Name: "b", Parameters: []byte(`{"type":"object","properties":{"x":{"$ref":"#/$defs/v"}},"required":["x"],"$defs":{"v":{"type":"boolean"}}}`)},
	}, "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !refs.Matches("b>\n<parameter=x>\ntrue\n</parameter>\n</function>\n</tool_call>") || refs.Matches("b>\n<parameter=x>\n7\n</parameter>\n</function>\n</tool_call>") {
		t.Error("tool b's $ref resolved in tool a's schema")
	}
	if !named.Matches("<parameter=city>\nRome\n</parameter>\n<parameter=unit>\n\"c\"\n</parameter>\n</function>\n</tool_call>") {
		t.Error("named call does not match")
	}
}
