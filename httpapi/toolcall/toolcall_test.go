package toolcall

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"cohort/internal/golden"
	"cohort/internal/pieces"
)

// result is the joined outcome of a parse: what a client reassembles from
// the stream.
type result struct {
	Content string `json:"content"`
	Calls   []call `json:"calls"`
}

type call struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// run feeds text in pieces of the given size (0: all at once) and joins
// the events, checking their order on the way.
func run(t testing.TB, p *Parser, text string, piece int) result {
	var r result
	pieces.Feed(p, text, piece, func(ev Event) {
		switch ev.Kind {
		case Text:
			if ev.Text == "" {
				t.Fatal("empty text event")
			}
			r.Content += ev.Text
		case CallStart:
			if ev.Call != len(r.Calls) || ev.Name == "" {
				t.Fatalf("call %d %q started after %d calls", ev.Call, ev.Name, len(r.Calls))
			}
			r.Calls = append(r.Calls, call{Name: ev.Name})
		case CallArgs:
			if ev.Call != len(r.Calls)-1 {
				t.Fatalf("arguments for call %d while call %d is open", ev.Call, len(r.Calls)-1)
			}
			r.Calls[ev.Call].Arguments += ev.Text
		}
	})
	return r
}

var weather = Tool{Name: "get_weather", Properties: map[string]any{
	"city":   map[string]any{"type": "string"},
	"days":   map[string]any{"type": "integer"},
	"units":  map[string]any{"enum": []any{"c", "f"}},
	"hourly": map[string]any{"type": "boolean"},
	"at":     map[string]any{"type": "object"},
	"tags":   map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
	"ratio":  map[string]any{"type": []any{"number", "null"}},
	"code":   map[string]any{"anyOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "string"}}},
}}

func TestParserGolden(t *testing.T) {
	cases := []struct {
		name, text string
		single     bool
	}{
		{"plain text", "Hello, world. No calls here.", false},
		{"one call", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", false},
		{"content then call", "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco, CA\n</parameter>\n</function>\n</tool_call>", false},
		{"types", "<tool_call>\n<function=get_weather>\n<parameter=days>\n3.0\n</parameter>\n<parameter=hourly>\nTrue\n</parameter>\n<parameter=at>\n{\"lat\": 1.5, \"lon\": -2}\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n<parameter=ratio>\nNone\n</parameter>\n<parameter=units>\nf\n</parameter>\n<parameter=code>\n42\n</parameter>\n</function>\n</tool_call>", false},
		{"type mismatch stays a string", "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n<parameter=at>\nnot json\n</parameter>\n<parameter=code>\nA7\n</parameter>\n</function>\n</tool_call>", false},
		{"multiline string", "<tool_call>\n<function=get_weather>\n<parameter=city>\nline one\nline \"two\"\n\n</parameter>\n</function>\n</tool_call>", false},
		{"unknown parameter and tool", "<tool_call>\n<function=other>\n<parameter=x>\n5\n</parameter>\n</function>\n</tool_call>", false},
		{"no parameters", "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>", false},
		{"parallel", "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nB\n</parameter>\n</function>\n</tool_call>", false},
		{"parallel off keeps the first", "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nB\n</parameter>\n</function>\n</tool_call>", true},
		{"sloppy: no closing parameter tags", "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n<parameter=days>\n2\n</function>\n</tool_call>", false},
		{"sloppy: cut off mid value", "<tool_call>\n<function=get_weather>\n<parameter=city>\nOs", false},
		{"sloppy: cut off after the name", "<tool_call>\n<function=get_weather>", false},
		{"sloppy: missing </tool_call>", "<tool_call>\n<function=get_weather>\n</function>\nthen text", false},
		{"repeated parameter keeps the first", "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n<parameter=city>\nB\n</parameter>\n</function>\n</tool_call>", false},
		{"not a call: JSON body", "<tool_call>\n{\"name\": \"get_weather\"}\n</tool_call>", false},
		{"not a call: cut after the marker", "see <tool_call>", false},
		{"not a call: bad name", "<tool_call>\n<function=a\nb>\n</function>", false},
		{"lookalike text", "a <tool and <function=x> and </tool_call>", false},
	}
	got := map[string]result{}
	for _, c := range cases {
		var first result
		for _, piece := range []int{0, 1, 2, 3, 7, 13} {
			r := run(t, NewParser([]Tool{weather}, c.single), c.text, piece)
			for i, cl := range r.Calls {
				if !json.Valid([]byte(cl.Arguments)) || !strings.HasPrefix(cl.Arguments, "{") {
					t.Errorf("%s (pieces of %d): call %d arguments %q are not a JSON object", c.name, piece, i, cl.Arguments)
				}
			}
			if piece == 0 {
				first = r
				continue
			}
			a, _ := json.Marshal(first)
			b, _ := json.Marshal(r)
			if string(a) != string(b) {
				t.Errorf("%s: pieces of %d give %s, all at once %s", c.name, piece, b, a)
			}
		}
		got[c.name] = first
	}
	data, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "parser.golden.json"), append(data, '\n'))
}

func TestStartInCall(t *testing.T) {
	p := NewParser([]Tool{weather}, false)
	p.StartInCall("get_weather")
	r := run(t, p, "\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>", 1)
	if len(r.Calls) != 1 || r.Calls[0].Name != "get_weather" || r.Calls[0].Arguments != `{"city": "Oslo"}` || r.Content != "" {
		t.Errorf("named start: %+v", r)
	}
	p = NewParser([]Tool{weather}, false)
	p.StartInCall("")
	r = run(t, p, "get_weather>\n<parameter=days>\n4\n</parameter>\n</function>\n</tool_call>", 2)
	if len(r.Calls) != 1 || r.Calls[0].Name != "get_weather" || r.Calls[0].Arguments != `{"days": 4}` {
		t.Errorf("required start: %+v", r)
	}
}

func TestConvert(t *testing.T) {
	str := map[string]any{"type": "string"}
	tests := []struct {
		raw    string
		schema any
		want   string
	}{
		{"Paris", str, `"Paris"`},
		{"42", str, `"42"`},
		{"42", map[string]any{"type": "integer"}, `42`},
		{"+42", map[string]any{"type": "integer"}, `42`},
		{"010", map[string]any{"type": "integer"}, `10`},
		{"4.0", map[string]any{"type": "integer"}, `4`},
		{"4.5", map[string]any{"type": "integer"}, `"4.5"`},
		{" 2.5e3 ", map[string]any{"type": "number"}, `2.5e3`},
		{".5", map[string]any{"type": "number"}, `0.5`},
		{"NaN", map[string]any{"type": "number"}, `"NaN"`},
		{"Inf", map[string]any{"type": "number"}, `"Inf"`},
		{"FALSE", map[string]any{"type": "boolean"}, `false`},
		{"yes", map[string]any{"type": "boolean"}, `"yes"`},
		{"None", map[string]any{"type": []any{"integer", "null"}}, `null`},
		{"7", map[string]any{"type": []any{"string", "integer"}}, `7`},
		{"{\"a\": [1, 2]}", map[string]any{"type": "object"}, `{"a":[1,2]}`},
		{"[1, 2]", map[string]any{"type": "object"}, `"[1, 2]"`},
		{"[1, 2]", map[string]any{"type": "array"}, `[1,2]`},
		{"3", map[string]any{"enum": []any{1.0, 2.0, 3.0}}, `3`},
		{"b", map[string]any{"enum": []any{"a", "b"}}, `"b"`},
		{"x", map[string]any{"const": "x"}, `"x"`},
		{"true", map[string]any{"oneOf": []any{map[string]any{"type": "boolean"}}}, `true`},
		{"5", nil, `"5"`},
		{"a\"b\\c\n", nil, `"a\"b\\c\n"`},
		{"\xff", str, `"\ufffd"`},
	}
	for _, tt := range tests {
		got := string(Convert(tt.raw, tt.schema))
		if got != tt.want {
			t.Errorf("Convert(%q, %v) = %s, want %s", tt.raw, tt.schema, got, tt.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("Convert(%q) = %s is not JSON", tt.raw, got)
		}
	}
}

// FuzzParser: for any output and any split, the parser never panics, the
// split does not change the result, and every call's arguments are one
// valid JSON object.
func FuzzParser(f *testing.F) {
	f.Add("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>", uint8(3))
	f.Add("text <tool_call><function=x><parameter=days>1</function>", uint8(1))
	f.Add("<tool_call>\n<function=get_weather>\n<parameter=at>\n{\"a\":1}\n</parameter>\n<parameter=code>\n\n", uint8(5))
	f.Add("<tool_call><tool_call><function=<function=>>", uint8(2))
	f.Fuzz(func(t *testing.T, text string, piece uint8) {
		for _, single := range []bool{false, true} {
			whole := run(t, NewParser([]Tool{weather}, single), text, 0)
			split := run(t, NewParser([]Tool{weather}, single), text, int(piece%16)+1)
			a, _ := json.Marshal(whole)
			b, _ := json.Marshal(split)
			if string(a) != string(b) {
				t.Fatalf("split %d: %s, whole %s", piece%16+1, b, a)
			}
			for _, c := range whole.Calls {
				var obj map[string]any
				if err := json.Unmarshal([]byte(c.Arguments), &obj); err != nil {
					t.Fatalf("arguments %q: %v", c.Arguments, err)
				}
			}
			if single && len(whole.Calls) > 1 {
				t.Fatalf("%d calls with parallel calls off", len(whole.Calls))
			}
		}
	})
}
