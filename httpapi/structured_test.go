package httpapi

import (
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"cohort/model/grammar/grammartest"
)

const personSchema = `{"type":"object","properties":{
	"name":{"type":"string","minLength":1,"maxLength":16},
	"email":{"type":"string","format":"email"},
	"age":{"type":"integer","minimum":0,"maximum":120},
	"role":{"enum":["admin","user","guest"]},
	"scores":{"type":"array","items":{"type":"number","minimum":0,"maximum":10},"maxItems":4}},
	"required":["name","email","age","role","scores"],"additionalProperties":false}`

func TestStructuredOutputsOpenAIClient(t *testing.T) {
	r := startReal(t, 1)
	var schema map[string]any
	if err := json.Unmarshal([]byte(personSchema), &schema); err != nil {
		t.Fatal(err)
	}
	judge := grammartest.Validator(t, []byte(personSchema))
	validate := func(out string) error { return judge([]byte(out)) }
	jsonSchema := openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "person", Schema: schema, Strict: openai.Bool(true)}}}
	chat := func(seed int64) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe a person.")},
			MaxTokens: openai.Int(200), Temperature: openai.Float(1), Seed: openai.Int(seed), ResponseFormat: jsonSchema}
	}

	t.Run("json_schema strict", func(t *testing.T) {
		for seed := range int64(3) {
			res, err := r.client.Chat.Completions.New(ctxT(t), chat(seed))
			if err != nil {
				t.Fatal(err)
			}
			c := res.Choices[0]
			t.Logf("seed %d: %s", seed, c.Message.Content)
			if err := validate(c.Message.Content); err != nil || c.FinishReason != "stop" {
				t.Fatalf("seed %d: %q (finish %s): %v", seed, c.Message.Content, c.FinishReason, err)
			}
		}
	})

	t.Run("json_schema streamed", func(t *testing.T) {
		stream := r.client.Chat.Completions.NewStreaming(ctxT(t), chat(7))
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if out := acc.Choices[0].Message.Content; validate(out) != nil {
			t.Fatalf("streamed %q does not validate: %v", out, validate(out))
		}
	})

	t.Run("json_object", func(t *testing.T) {
		p := chat(1)
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
		res, err := r.client.Chat.Completions.New(ctxT(t), p)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if out := res.Choices[0].Message.Content; json.Unmarshal([]byte(out), &obj) != nil {
			t.Fatalf("json_object output %q is not an object", out)
		}
	})

	t.Run("regex", func(t *testing.T) {
		const pat = `[A-Z][a-z]{2,6}-\d{3}`
		for seed := range int64(3) {
			p := chat(seed)
			p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{}
			res, err := r.client.Chat.Completions.New(ctxT(t), p, option.WithJSONSet("structured_outputs", map[string]any{"regex": pat}))
			if err != nil {
				t.Fatal(err)
			}
			if out := res.Choices[0].Message.Content; !regexp.MustCompile(`^` + pat + `$`).MatchString(out) {
				t.Fatalf("seed %d: %q does not match %s", seed, out, pat)
			}
		}
	})

	t.Run("choice", func(t *testing.T) {
		choices := []string{"positive", "negative", "neutral"}
		for seed := range int64(3) {
			res, err := r.client.Completions.New(ctxT(t), openai.CompletionNewParams{Model: "tiny",
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Sentiment:")}, MaxTokens: openai.Int(20),
				Temperature: openai.Float(1), Seed: openai.Int(seed)}, option.WithJSONSet("structured_outputs", map[string]any{"choice": choices}))
			if err != nil {
				t.Fatal(err)
			}
			if out := res.Choices[0].Text; !slices.Contains(choices, out) {
				t.Fatalf("seed %d: %q is not a choice", seed, out)
			}
		}
	})

	t.Run("unsupported keyword", func(t *testing.T) {
		var bad map[string]any
		json.Unmarshal([]byte(`{"type":"object","properties":{"a":{"oneOf":[{"type":"string"},{"type":"integer"}]}}}`), &bad)
		p := chat(1)
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "bad", Schema: bad}}}
		_, err := r.client.Chat.Completions.New(ctxT(t), p)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, `"oneOf"`) {
			t.Fatalf("err = %v, want a 400 naming oneOf", err)
		}
	})

	t.Run("max_tokens too small", func(t *testing.T) {
		p := chat(1)
		p.MaxTokens = openai.Int(4)
		_, err := r.client.Chat.Completions.New(ctxT(t), p)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
			t.Fatalf("err = %v, want 400", err)
		}
	})
}
