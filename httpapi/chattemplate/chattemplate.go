// Package chattemplate renders a model's Jinja chat template (the
// `chat_template` of its tokenizer_config.json) into the prompt text the model
// was trained on, the way Hugging Face's apply_chat_template does, tools,
// tool calls and tool results included.
package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ardanlabs/jinja"
)

// Message is one chat turn. Content is plain text: content parts are joined
// by the caller.
type Message struct {
	Role    string
	Content string
	// ReasoningContent is an assistant turn's reasoning (templates that
	// know it write it as a think block).
	ReasoningContent string
	ToolCalls        []ToolCall // an assistant turn's calls
	ToolCallID       string     // a tool turn: the call it answers
}

// ToolCall is one function call of an assistant turn. Arguments is the
// decoded JSON object, as templates iterate it (HF passes a dict).
type ToolCall struct {
	ID        string
	Name      string
	Arguments map[string]any
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	tmpl     *jinja.Template
	bos, eos string
}

// Reserved variables that chat_template_kwargs cannot override.
var reserved = map[string]bool{"messages": true, "add_generation_prompt": true, "tools": true,
	"bos_token": true, "eos_token": true}

// New compiles a chat template. bos and eos are exposed to the template as
// bos_token and eos_token.
func New(src, bos, eos string) (*Template, error) {
	if src == "" {
		return nil, errors.New("chattemplate: the template is empty")
	}
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	return &Template{tmpl: t, bos: bos, eos: eos}, nil
}

// Render renders msgs with add_generation_prompt set as given. kwargs are
// extra template variables (vLLM's chat_template_kwargs, e.g.
// enable_thinking); they cannot replace the reserved ones.
func (t *Template) Render(msgs []Message, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	return t.RenderTools(msgs, nil, addGenerationPrompt, kwargs)
}

// RenderTools is Render with the tools variable set to tools (each an
// OpenAI tool object, {"type": "function", "function": {...}}, decoded
// from JSON); with no tools the variable is left undefined, as HF leaves
// it None.
func (t *Template) RenderTools(msgs []Message, tools []any, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		msg := map[string]any{"role": m.Role, "content": m.Content}
		if m.ReasoningContent != "" {
			msg["reasoning_content"] = m.ReasoningContent
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]any, len(m.ToolCalls))
			for k, c := range m.ToolCalls {
				args := c.Arguments
				if args == nil {
					args = map[string]any{}
				}
				calls[k] = map[string]any{"id": c.ID, "type": "function",
					"function": map[string]any{"name": c.Name, "arguments": args}}
			}
			msg["tool_calls"] = calls
		}
		if m.ToolCallID != "" {
			msg["tool_call_id"] = m.ToolCallID
		}
		list[i] = msg
	}
	data := make(map[string]any, len(kwargs)+4)
	for k, v := range kwargs {
		if reserved[k] {
			return "", fmt.Errorf("chattemplate: %q cannot be set as a template argument", k)
		}
		data[k] = v
	}
	data["messages"] = list
	if len(tools) > 0 {
		data["tools"] = tools
	}
	data["add_generation_prompt"] = addGenerationPrompt
	data["bos_token"] = t.bos
	data["eos_token"] = t.eos
	out, err := t.tmpl.Render(data)
	if err != nil {
		return "", fmt.Errorf("chattemplate: %w", err)
	}
	return out, nil
}

// Config is the chat-related part of a tokenizer_config.json.
type Config struct {
	Template string // the default chat template ("" when the model has none)
	BOS, EOS string
}

// ParseConfig reads a tokenizer_config.json. chat_template may be a string or
// a list of {name, template} (the one named "default" is used); bos_token and
// eos_token may be strings, objects with a content field, or null.
func ParseConfig(data []byte) (Config, error) {
	var raw struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("chattemplate: tokenizer_config.json: %w", err)
	}
	var c Config
	var err error
	if c.Template, err = templateField(raw.ChatTemplate); err != nil {
		return Config{}, err
	}
	if c.BOS, err = tokenField("bos_token", raw.BOS); err != nil {
		return Config{}, err
	}
	if c.EOS, err = tokenField("eos_token", raw.EOS); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadConfig reads dir/tokenizer_config.json. A missing file gives an empty
// Config and no error.
func LoadConfig(dir string) (Config, error) {
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return Config{}, nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("chattemplate: %w", err)
	}
	return ParseConfig(data)
}

func templateField(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chattemplate: chat_template is neither a string nor a list of named templates: %w", err)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", nil
}

func tokenField(name string, raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("chattemplate: %s is neither a string nor an object: %w", name, err)
	}
	return obj.Content, nil
}
