package chattemplate

import (
	"path/filepath"
	"strings"
	"testing"

	"cohort/internal/testmodels/modelgen"
	"cohort/model/tokenizer/tokenizertest"
)

func loadQwen3(t *testing.T) *Template {
	t.Helper()
	cfg, err := LoadConfig(tokenizertest.Qwen3Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.EOS != "<|im_end|>" || cfg.BOS != "" {
		t.Fatalf("bos %q eos %q, want \"\" and <|im_end|>", cfg.BOS, cfg.EOS)
	}
	tmpl, err := New(cfg.Template, cfg.BOS, cfg.EOS)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestQwen3Template renders the real Qwen3 template. The expected strings
// follow the template by hand: a leading system message is emitted first
// (not again in the loop), user turns verbatim, assistant turns before the
// last user query lose their <think> block, and the generation prompt opens
// an assistant turn (plus an empty think block when enable_thinking=false).
func TestQwen3Template(t *testing.T) {
	tmpl := loadQwen3(t)
	conv := []Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "What is 2+2?"},
		{Role: "assistant", Content: "4"},
		{Role: "user", Content: "And 3+3?"},
	}
	tests := []struct {
		name   string
		msgs   []Message
		kwargs map[string]any
		want   string
	}{
		{
			name: "system user assistant user",
			msgs: conv,
			want: "<|im_start|>system\nYou are terse.<|im_end|>\n" +
				"<|im_start|>user\nWhat is 2+2?<|im_end|>\n" +
				"<|im_start|>assistant\n4<|im_end|>\n" +
				"<|im_start|>user\nAnd 3+3?<|im_end|>\n" +
				"<|im_start|>assistant\n",
		},
		{
			name:   "thinking disabled",
			msgs:   conv,
			kwargs: map[string]any{"enable_thinking": false},
			want: "<|im_start|>system\nYou are terse.<|im_end|>\n" +
				"<|im_start|>user\nWhat is 2+2?<|im_end|>\n" +
				"<|im_start|>assistant\n4<|im_end|>\n" +
				"<|im_start|>user\nAnd 3+3?<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\n\n</think>\n\n",
		},
		{
			name: "history reasoning is dropped",
			msgs: []Message{
				{Role: "user", Content: "Hi"},
				{Role: "assistant", Content: "<think>\nGreet back.\n</think>\n\nHello!"},
				{Role: "user", Content: "Bye"},
			},
			want: "<|im_start|>user\nHi<|im_end|>\n" +
				"<|im_start|>assistant\nHello!<|im_end|>\n" +
				"<|im_start|>user\nBye<|im_end|>\n" +
				"<|im_start|>assistant\n",
		},
		{
			name: "no system message",
			msgs: []Message{{Role: "user", Content: "Hi"}},
			want: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tmpl.Render(tt.msgs, true, tt.kwargs)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("rendered\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestBuiltinTemplate(t *testing.T) {
	dir := t.TempDir()
	if err := modelgen.Write(dir, modelgen.Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := New(cfg.Template, cfg.BOS, cfg.EOS)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		want    Config
		wantErr string
	}{
		{"string fields", `{"chat_template":"T","bos_token":"<s>","eos_token":"</s>"}`, Config{"T", "<s>", "</s>"}, ""},
		{"object tokens", `{"chat_template":"T","bos_token":{"content":"<s>"},"eos_token":null}`, Config{"T", "<s>", ""}, ""},
		{"named templates", `{"chat_template":[{"name":"tool_use","template":"X"},{"name":"default","template":"D"}]}`, Config{Template: "D"}, ""},
		{"no template", `{}`, Config{}, ""},
		{"bad template", `{"chat_template":7}`, Config{}, "chat_template"},
		{"bad json", `{`, Config{}, "tokenizer_config.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tt.json))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	if c, err := LoadConfig(filepath.Join(t.TempDir(), "missing")); err != nil || c != (Config{}) {
		t.Fatalf("missing file: %+v, %v", c, err)
	}
}

func TestRenderErrors(t *testing.T) {
	if _, err := New("", "", ""); err == nil {
		t.Error("empty template compiled")
	}
	if _, err := New("{% if %}", "", ""); err == nil {
		t.Error("broken template compiled")
	}
	tmpl, err := New("{{ raise_exception('no system role') }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(nil, true, nil); err == nil || !strings.Contains(err.Error(), "no system role") {
		t.Errorf("raise_exception: %v", err)
	}
	ok, _ := New("x", "", "")
	if _, err := ok.Render(nil, true, map[string]any{"messages": 1}); err == nil {
		t.Error("kwargs overrode messages")
	}
}
